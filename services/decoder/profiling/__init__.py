"""Device timelines of the running engine (torch profiler), summarized in plain Python."""
