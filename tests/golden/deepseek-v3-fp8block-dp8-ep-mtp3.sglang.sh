#!/bin/sh
# SGLang 0.5 (sglang 0.5 (main 469c63e) python/sglang/srt/server_args.py)
exec python -m sglang.launch_server \
    --model-path deepseek-ai/DeepSeek-V3 \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype auto \
    --max-running-requests 512 \
    --chunked-prefill-size 65536 \
    --max-prefill-tokens 8192 \
    --tp-size 8 \
    --enable-dp-attention \
    --dp-size 8 \
    --ep-size 8 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --speculative-algorithm EAGLE \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4
