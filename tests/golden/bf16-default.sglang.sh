#!/bin/sh
# SGLang 0.5 (sglang 0.5 (main 469c63e) python/sglang/srt/server_args.py)
exec python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --kv-cache-dtype auto \
    --max-running-requests 64 \
    --chunked-prefill-size 4096 \
    --max-prefill-tokens 4096 \
    --tp-size 1 \
    --mem-fraction-static 0.9 \
    --page-size 16
