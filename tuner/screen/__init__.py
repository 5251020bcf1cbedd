"""The screened tune: the simulator screens the whole space, the real backend measures the
top-K variants of the predicted front plus the engine's own defaults, and only measured variants
are recommended (`tuner tune --backend vllm|torch --screen sim --confirm K`).

The screen is an ordinary sim capacity tune of the same run (same model, device profile, SLA,
workload, space, sampler and trials), written to RUN/screen/. Each picked variant is then
measured ("confirmed") with the backend's capacity search on one server, within the run's probe
budget; an overall time budget skips the variants not yet started once it is spent.

Modules by job: `options` (the options and the rules on how the flags mix), `variant` (a
measured variant, predicted and measured), `candidates` (the top-K pick), `baseline` (the
engine's defaults), `measure` (measuring, predicting, recommending), `journal` (what makes a run
resumable), `outputs` (confirm.csv, confirm.yaml, best.yaml), `refit`, `report` and `run`.
"""
