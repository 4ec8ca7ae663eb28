"""The demo recommender: synthetic interactions -> RQ-KMeans SIDs -> a tiny Qwen3 trained on CPU.

``widebeam demo build [--out DIR]`` (:mod:`.build`) produces a model directory and a catalog that
``widebeam up`` serves; ``python -m widebeam.demo`` builds them and prints recommendations.
"""
