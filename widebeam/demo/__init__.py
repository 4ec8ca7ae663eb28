"""The demo recommender: synthetic interactions -> RQ-KMeans SIDs -> a tiny Qwen3 trained on CPU.

``widebeam demo build [--out DIR]`` (:mod:`.build`) produces a model directory and a catalog that
``widebeam up`` serves; ``python -m widebeam.demo`` builds them and prints recommendations.
Steps: :mod:`.data`, :mod:`.catalog` (SIDs and the catalog file), :mod:`.model` and :mod:`.train`,
:mod:`.evaluate` (through the engine); :mod:`.config` holds every knob, :mod:`.progress` the
progress bars every step shows.
"""
