"""Load generation against OpenAI-compatible servers and the latency statistics of a run."""
