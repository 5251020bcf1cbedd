#!/bin/sh
# SGLang 0.5 (sglang 0.5 (main 469c63e) python/sglang/srt/server_args.py)
exec python -m sglang.launch_server \
    --model-path meta-llama/Llama-3.1-8B-Instruct \
    --dtype bfloat16 \
    --quantization fp8 \
    --kv-cache-dtype fp8_e4m3 \
    --max-running-requests 181 \
    --chunked-prefill-size 6656 \
    --max-prefill-tokens 6656 \
    --tp-size 2 \
    --mem-fraction-static 0.9 \
    --page-size 16 \
    --speculative-algorithm NGRAM \
    --speculative-num-draft-tokens 5 \
    --disable-overlap-schedule
