"""One tuning run: its spec (every input), its folder on disk, the tune loop, its workers and the
report. The screened tune (`--screen sim --confirm K`) is `tuner.screen`, built on this."""
