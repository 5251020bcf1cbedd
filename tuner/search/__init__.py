"""The search: knob space, Optuna study and sampler, objectives, trials as data, Pareto front."""
