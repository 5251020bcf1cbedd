"""The analytical performance model: pure functions over specs (memory, step cost, scheduling).

Modules: `efficiency` (the tunable constants, one place), `precision` (what a quantization costs
on a GPU), `memory` (weights, KV capacity), `costs` (roofline time of one engine step),
`speculative` (draft + verify), `scheduler` (continuous-batching simulation), `summary`
(percentiles -> Metrics), `capacity` (highest Poisson rate meeting an SLA), `bands` (the
error band of a prediction: calibration residuals or the shipped validation errors).
"""
