"""`widebeam up`: the whole stack on one machine as child processes (used by `make demo`)."""
