"""The schemas of a run folder's YAML result files (best.yaml, plan.yaml, confirm.yaml).

Each file is written from one pydantic model and read back through it; `schema_version` says
which layout a file has, and files written before it existed (no version) still load.
"""
