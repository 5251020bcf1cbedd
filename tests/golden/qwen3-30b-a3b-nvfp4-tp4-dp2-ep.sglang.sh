#!/bin/sh
# SGLang 0.5 (sglang 0.5 (main 469c63e) python/sglang/srt/server_args.py)
exec python -m sglang.launch_server \
    --model-path Qwen/Qwen3-30B-A3B \
    --dtype bfloat16 \
    --quantization modelopt_fp4 \
    --kv-cache-dtype auto \
    --max-running-requests 192 \
    --chunked-prefill-size 8192 \
    --max-prefill-tokens 4096 \
    --tp-size 8 \
    --enable-dp-attention \
    --dp-size 2 \
    --ep-size 8 \
    --mem-fraction-static 0.9 \
    --page-size 16
