#!/bin/sh
# SGLang 0.5 (sglang 0.5 (main 469c63e) python/sglang/srt/server_args.py)
exec python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype float16 \
    --quantization awq_marlin \
    --kv-cache-dtype auto \
    --max-running-requests 23 \
    --chunked-prefill-size 11264 \
    --max-prefill-tokens 11264 \
    --tp-size 1 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --disable-radix-cache \
    --speculative-algorithm STANDALONE \
    --speculative-draft-model-path meta-llama/Llama-3.2-1B-Instruct \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4
