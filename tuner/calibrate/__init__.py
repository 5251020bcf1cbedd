"""`tuner calibrate`: measure the local device and fit the simulator's efficiency constants.

measure (device peaks, engine step times) -> fit (bounded least squares, log errors) -> profile
(a GPUProfile YAML with a `calibration` block); refit updates a profile from confirmed runs.
"""
