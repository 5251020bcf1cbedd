"""The analysed run: computed once after the search from the trial records (the front, the
picks per engine with their exports, the explanations, the answer card); the terminal summary,
best.yaml, exports/README.md and report.html only render it."""
