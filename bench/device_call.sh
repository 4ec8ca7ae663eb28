#!/usr/bin/env bash
# One call on the lent GPU machine: install the carried wheels and this tree, run the named
# steps in order, each under its own time limit, with its output in $OUT/STEP.log; the steps'
# JSON and the services' logs go into one $OUT/results.tgz (the device returns 8 files: keep
# to 6 steps a call).
#
#   WIDEBEAM_COMMIT=abc1234 bash bench/device_call.sh STEP[=SECONDS] ...   (repository root)
#
# carry [".whl"] (bench/device_wheels.py fills it). Steps (default limit in brackets):
#   gpu-tests [300]        pytest -m gpu over the kernels, the decoder and the wide-beam test
#   stack [260]            stack.py --quick, the decoder's port in the engine's process
#   stack-api [260]        stack.py --quick --api-processes 1
#   stack-profile [260]    stack.py --quick --profile: py-spy on the decoder and gateway over
#                          the closed-loop phases; spy_summary.py's reading in the step's log
#   stack-api-profile [260]  the same with --api-processes 1
#   stack-timeline [300]   stack.py --quick --timeline: a device timeline (torch profiler) of
#                          every closed-loop phase, the in-process engine's and the decoder's
#   stack-deadline [260]   stack.py --quick --sweep-deadline-ms ${WIDEBEAM_SWEEP_DEADLINE_MS:-300}:
#                          the sweep's clients send their own deadline (timeout_ms)
#   stack-slo [260]        stack.py --quick --sweep-deadline-x ${WIDEBEAM_SWEEP_DEADLINE_X:-1.8}:
#                          the 2x phase's clients send that many times the 0.5x phase's p99 as
#                          their deadline (issue 23's 2x row, stated as the clients' SLO)
#   stack-api-bounded [260]  stack.py --quick --api-processes 1 --max-queue-wait-s 0.1
#                          (or $WIDEBEAM_QUEUE_WAIT_S)
#   ab-tree [420]          an in-process bench, ${WIDEBEAM_AB_SCRIPT:-genrec_throughput.py} with
#                          ${WIDEBEAM_AB_BENCH_ARGS:---quick}, on the tree in
#                          ${WIDEBEAM_BEFORE:-.before} (with_tree.py: B) and on this one (A), for
#                          ${WIDEBEAM_AB_ROUNDS:-2} rounds, B first in odd rounds and A first in even
#                          ones; tags _B1, _A1, ... (carry the tree: git archive BASE widebeam
#                          services | tar -x -C .before)
#   ab-stack [420]         ab_stack.py: this tree's decoder (A) beside B (and C), their
#                          gRPC and REST phases rotated for ${WIDEBEAM_AB_ROUNDS:-8} rounds; B gets
#                          the decoder flags ${WIDEBEAM_AB_B_ARGS:-"--answers-at-step-start
#                          --group-wait-ms 3"}, where ";" starts the next variant's flags
#                          (" " alone: none, for --other-tree; "--gateway" starts a variant's
#                          gateway flags, e.g. "--gateway --workers 2"), and $WIDEBEAM_AB_ARGS more
#                          options (e.g. "--other-tree ../.before --widths 50,512"); each
#                          decoder holds ~27 GB, so B and C together need an H200 (on an
#                          H100 the third decoder runs out of memory: one variant a call)
#   decoder-startup [300]  decoder_startup.py: the decoder's time to ready on W3's model at
#                          ${WIDEBEAM_STARTUP_ROWS:-1024,8192} rows, start-up capture on and off
#   w1-sharing [180]       suffix_sharing.py --tokens 128: how much generated-token KV W1's
#                          5,000 rows share (what a tree-aware suffix kernel could save)
#   w1-profile [180]       profile_step.py --beams 5000 --tokens ${WIDEBEAM_W1_TOKENS:-64}
#   w1-shared [300]        wide_beam.py --quick at ${WIDEBEAM_W1_TOKENS_SET:-16,32,64,128} tokens
#                          with --no-shared-suffix, then with the shared-suffix kernels
#   w1-split [300]         wide_beam.py --quick at 32,64,128 tokens with --tree-split 8:8
#                          (the default), then ${WIDEBEAM_W1_SPLIT:-4:4}
#   attention-gpu-tests [240]  pytest over the cascade and shared-suffix kernels (compiled),
#                          the engine on Triton and the graph = eager = overlap digests
#   engine-gpu-tests [120] the last two of those alone: the engine on Triton, the digests;
#                          and the start-up warm-up (nothing captured while serving)
#   kernels-tree [240]     kernels.py --only tree: W1's decode attention on a beam tree, every
#                          row alone vs the shared-suffix plan, its kernel's N tile 32/64 ×
#                          programs per SM 8/16/32 × warps 4/8 × registers per thread (the
#                          default cap; 0: the compiler's) × split rules 8:8 (the
#                          WIDEBEAM_TREE_{BLOCK_N,PROGRAMS,WARPS,REGISTERS,SPLIT,ROWS} lists),
#                          the plan's time
#   kernels-padding [120]  kernels.py --only padding
#   kernels-prefix [300]   kernels.py --only prefix: the prefix kernel's rows per item
#                          (${WIDEBEAM_PREFIX_ROWS:-auto,64}) x BLOCK_N:warps:stages[:registers]
#                          tiles (\$WIDEBEAM_PREFIX_TILES, else the bench's list) at W3 / W4 / W2 /
#                          W1 shapes (or \$WIDEBEAM_PREFIX_SHAPES: names or REQUESTSxROWSxPROMPT),
#                          bf16 and FP8 KV, the FP8 dots by the kernels' rule or each of
#                          \$WIDEBEAM_PREFIX_DOTS (auto,bf16,fp16)
#   kernels-fp8kv [120]    kernels.py --only fp8kv: cascade decode at W2 / W4 / W3 shapes over a
#                          bf16 cache, then FP8 with the prefix kernel's dots in bf16, fp16, default
#   kernels-fp8prefill [90]  kernels.py --only fp8prefill: one layer's KV write + prefill at W2
#                          (5,000 tokens) and W4 (3 x 2,451) shapes: bf16 cache, FP8 with the
#                          rows widened by the prefill (two copies), FP8 widened by the write
#   prefill-tiles [300]    prefill_tiles.py --tiles few: the prefill kernel at W2's 1,000 / 5,000
#                          tokens and W4's 3 x 2,451, five tiles x its options (unmasked tiles
#                          before the diagonal, tensor-descriptor K/V, longest work first)
#   w3 [150]               genrec_throughput.py --quick
#   w2 [120]               sid_decode.py --quick
#   w1 [180]               wide_beam.py --quick --hf-tokens '': W1 at 3 / 16 / 32 / 64 / 128 tokens
#   w4-shared [200]        recif_throughput.py --quick --variants shared,shared-nocache: W4's
#                          1,000-token shared instruction prefix, prefix cache on, then off
#   fp8-quality [240]      fp8_quality.py --users 3000
#   fp8-gemm [300]         fp8_gemm.py: every FP8 GEMM / fused-quantization variant at W3's
#                          shapes (bounded by its own --budget-s 220)
#   fp8-gpu-tests [200]    pytest over the FP8 kernels, fused layers and FP8 model/engine, all
#                          tests (not only -m gpu: the Triton kernel tests run compiled on CUDA)
#   fp8-kv-gpu-tests [240] pytest over the FP8 KV cache's kernels, cache and engine, the
#                          quantizers, the prefill kernel and FP8 probabilities, all tests (the
#                          unmarked Triton ones run compiled on CUDA)
#   w4-fp8-kv [300]        recif_throughput.py --quick --variants distinct, bf16 KV then
#                          --kv-dtype fp8 (tag _fp8kv)
#   fp8-kv-quality [240]   fp8_quality.py --users 3000 --quantization none --kv-dtype fp8
#   fp8-all-quality [240]  fp8_quality.py --users 3000 --kv-dtype fp8: FP8 linears (fast
#                          accumulation) and the FP8 KV cache, the FP8 serving defaults
#   w2-fp8 [240]           sid_decode.py --quick, bf16 then --quantization fp8 --kv-dtype fp8
#   w2-clock [300]         sid_decode.py --contexts 5000 --reps ${WIDEBEAM_W2_REPS:-10}
#                          --host-clock: bf16, FP8 + FP8 KV, FP8 linears alone, FP8 KV alone,
#                          FP8 + FP8 KV with --sync-debug, then both with --profile 5000 (the
#                          profiler's effect on the time), bf16 again last
#   prefill-limit [420]    W2 at 5000 tokens (--host-clock) and W4 (--quick --variants
#                          distinct), bf16 then FP8 + FP8 KV, each first at the engine's
#                          prefill graph limit (8,192), then --max-prefill-graph-tokens
#                          ${WIDEBEAM_PREFILL_LIMIT:-2048} (W2's and W4's prompts are past 2,048)
#   prefill-split [420]    prefill_graph_limit.py --limits 2048,2048+split,4096 --rounds 10
#                          --requests 360: W3 n = 50, c = 12 (3,612-token prefill batches) with
#                          the batches past 2,048 eager, split into graph-sized batches, or
#                          graphed at 4,096, in alternation ($WIDEBEAM_SPLIT_LIMITS,
#                          $WIDEBEAM_SPLIT_ROUNDS, $WIDEBEAM_SPLIT_REQUESTS replace the three;
#                          $WIDEBEAM_SPLIT_CONCURRENCY the 12)
#   w3-fp8 [300]           genrec_throughput.py --quick, bf16 then --quantization fp8
#                          --kv-dtype fp8
#   w4-fp8 [300]           recif_throughput.py --quick --variants distinct, bf16 then
#                          --quantization fp8 --kv-dtype fp8
#   w3-fp8-head [360]      w3-fp8, then a third run with --head-quantization fp8 (tag
#                          _fp8head): the LM head's GEMM in FP8 too
#   w4-fp8-head [420]      w4-fp8 and its third run with --head-quantization fp8
#   fp8-head-quality [360] fp8_quality.py --users 3000 --kv-dtype fp8 --head-quantization fp8:
#                          bf16, the FP8 serving defaults, and those with the LM head in FP8,
#                          on one trained model
#   w4-fp8-queries [300]   recif_throughput.py --quick --variants distinct, FP8 linears + KV +
#                          head, without then with --kv-fp8-queries then with, then without
#                          (tags _fq, _fq1: the second of each overwrites the first's JSON; the
#                          log keeps all four)
#   w3-fp8-queries [240]   genrec_throughput.py, FP8 linears + KV + head, without, with, with,
#                          without --kv-fp8-queries (tags _fq, _fq1, as w4-fp8-queries)
#   w2-fp8-queries [200]   sid_decode.py --quick --contexts 1000,5000 --reps 10, FP8 linears +
#                          KV, without, with, with, without --kv-fp8-queries
#   fp8-queries-quality [420]  fp8-head-quality's arms and one with --kv-fp8-queries
#   w4-fp8-probabilities [300]  recif_throughput.py --quick --variants distinct, FP8 linears +
#                          KV + head + queries, without then with then with, then without
#                          --kv-fp8-probabilities (tags _fp, _fp1, as w4-fp8-queries)
#   w2-fp8-probabilities [200]  sid_decode.py --quick --contexts 1000,5000 --reps 10, FP8
#                          linears + KV + queries, without, with, with, without
#                          --kv-fp8-probabilities
#   fp8-probabilities-quality [420]  fp8_quality.py --users 3000 --kv-dtype fp8: bf16, the FP8
#                          serving defaults, those with FP8 queries, and with FP8 probabilities too
# w2-fp8, w3-fp8(-head) and w4-fp8(-head) pass $WIDEBEAM_PROFILE, when set, as `--profile
# PHASES` to each of their runs (e.g. WIDEBEAM_PROFILE=50,1000: a torch profile of those widths,
# bf16 and FP8); with WIDEBEAM_PROFILE_APART=1 as well, they profile a second pass of those
# phases after the timed one (`--profile-apart`), so their numbers stay unprofiled.
# Every stack* step appends $WIDEBEAM_STACK_ARGS to its stack.py command (e.g.
# "--gateway-workers 2").
# A step that runs past its limit is stopped and the next one starts; the last lines of each
# log are printed at the end, so the call's reply carries a summary.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
export WIDEBEAM_COMMIT=${WIDEBEAM_COMMIT:-unknown}
export WIDEBEAM_BENCH_LOGS=/tmp/widebeam-service-logs
mkdir -p "$WIDEBEAM_BENCH_LOGS"

started=$(date +%s)
{
    pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-deps --no-build-isolation -e .
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
} > "$OUT/setup.log" 2>&1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
echo "setup: $(( $(date +%s) - started )) s" >> "$OUT/setup.log"

STACK_ARGS=${WIDEBEAM_STACK_ARGS:-}
AB_B_ARGS=${WIDEBEAM_AB_B_ARGS:---answers-at-step-start --group-wait-ms 3}
AB_VARIANTS=""
IFS=';' read -ra AB_EACH <<< "$AB_B_ARGS"
for flags in "${AB_EACH[@]}"; do AB_VARIANTS+=" --b-args='$flags'"; done
PROFILE_ARGS=${WIDEBEAM_PROFILE:+--profile $WIDEBEAM_PROFILE}
SEPARATE_PROFILE_ARGS="$PROFILE_ARGS${WIDEBEAM_PROFILE:+${WIDEBEAM_PROFILE_APART:+ --profile-apart}}"
step_command() {
    case "$1" in
        gpu-tests) echo "python3 -m pytest -q -p no:cacheprovider -m gpu tests/kernels \
            tests/services/decoder tests/services/gateway/test_wide_beams_gpu.py \
            -k 'not flashinfer'" ;;
        stack) echo "cd bench && python3 stack.py --quick $STACK_ARGS" ;;
        stack-api) echo "cd bench && python3 stack.py --quick --api-processes 1 $STACK_ARGS" ;;
        stack-slo) echo "cd bench && python3 stack.py --quick \
            --sweep-deadline-x ${WIDEBEAM_SWEEP_DEADLINE_X:-1.8} $STACK_ARGS" ;;
        stack-deadline) echo "cd bench && python3 stack.py --quick \
            --sweep-deadline-ms ${WIDEBEAM_SWEEP_DEADLINE_MS:-300} $STACK_ARGS" ;;
        stack-timeline) echo "cd bench && python3 stack.py --quick --timeline \$OUT/timelines \
            $STACK_ARGS" ;;
        stack-api-bounded) echo "cd bench && python3 stack.py --quick --api-processes 1 \
            --max-queue-wait-s ${WIDEBEAM_QUEUE_WAIT_S:-0.1} $STACK_ARGS" ;;
        stack-profile | stack-api-profile) echo "cd bench && python3 stack.py --quick \
            --api-processes $([ "$1" = stack-profile ] && echo 0 || echo 1) --profile \$OUT/spy \
            $STACK_ARGS && for f in \$OUT/spy/*.spy; do echo \"=== \$f\"; python3 spy_summary.py \$f; done" ;;
        ab-tree) echo "cd bench && for r in \$(seq ${WIDEBEAM_AB_ROUNDS:-2}); do \
            order='B A'; [ \$((r % 2)) = 0 ] && order='A B'; for side in \$order; do \
            run=python3; [ \$side = B ] && run='python3 with_tree.py ../${WIDEBEAM_BEFORE:-.before}'; \
            \$run ${WIDEBEAM_AB_SCRIPT:-genrec_throughput.py} ${WIDEBEAM_AB_BENCH_ARGS:---quick} \
            --tag _\$side\$r || exit 1; done; done" ;;
        ab-stack) echo "cd bench && python3 ab_stack.py --rounds ${WIDEBEAM_AB_ROUNDS:-8} \
            --phase-seconds 2 $AB_VARIANTS ${WIDEBEAM_AB_ARGS:-}" ;;
        decoder-startup) echo "cd bench && python3 decoder_startup.py \
            --max-rows ${WIDEBEAM_STARTUP_ROWS:-1024,8192}" ;;
        w1-sharing) echo "cd bench && python3 suffix_sharing.py --tokens 128" ;;
        w1-profile) echo "cd bench && python3 profile_step.py --beams 5000 \
            --tokens ${WIDEBEAM_W1_TOKENS:-64}" ;;
        w1-shared) echo "cd bench && for flag in --no-shared-suffix ''; do \
            python3 wide_beam.py --quick --hf-tokens '' --tokens ${WIDEBEAM_W1_TOKENS_SET:-16,32,64,128} \
            \$flag || exit 1; done" ;;
        w1-split) echo "cd bench && for rule in 8:8 ${WIDEBEAM_W1_SPLIT:-4:4}; do \
            python3 wide_beam.py --quick --hf-tokens '' --tokens 32,64,128 \
            --tree-split \$rule || exit 1; done" ;;
        attention-gpu-tests) echo "python3 -m pytest -q -p no:cacheprovider \
            tests/kernels/attention/test_triton_shared_suffix.py \
            tests/kernels/attention/test_triton_prefill.py \
            tests/kernels/attention/test_triton_cascade.py \
            tests/kernels/attention/test_engine_with_triton.py \
            tests/services/decoder/test_engine_graphs_gpu.py \
            tests/services/decoder/test_warm_up_gpu.py" ;;
        kernels-tree) echo "cd bench && python3 kernels.py --only tree \
            --shared-block-n ${WIDEBEAM_TREE_BLOCK_N:-32,64} \
            --shared-programs ${WIDEBEAM_TREE_PROGRAMS:-8,16,32} \
            --shared-warps ${WIDEBEAM_TREE_WARPS:-4,8} \
            --shared-registers ${WIDEBEAM_TREE_REGISTERS:-auto} \
            --tree-split ${WIDEBEAM_TREE_SPLIT:-8:8} --tree-rows ${WIDEBEAM_TREE_ROWS:-auto} \
            --tag _tree" ;;
        kernels-padding) echo "cd bench && python3 kernels.py --only padding" ;;
        kernels-prefix) echo "cd bench && python3 kernels.py --only prefix --reps 20 \
            --prefix-rows ${WIDEBEAM_PREFIX_ROWS:-auto,64} \
            ${WIDEBEAM_PREFIX_TILES:+--prefix-tiles $WIDEBEAM_PREFIX_TILES} \
            ${WIDEBEAM_PREFIX_SHAPES:+--prefix-shapes '$WIDEBEAM_PREFIX_SHAPES'} \
            ${WIDEBEAM_PREFIX_DOTS:+--prefix-dots $WIDEBEAM_PREFIX_DOTS} --tag _prefix" ;;
        kernels-fp8kv) echo "cd bench && python3 kernels.py --only fp8kv --tag _fp8kv" ;;
        kernels-fp8prefill) echo "cd bench && python3 kernels.py --only fp8prefill \
            --tag _fp8prefill" ;;
        prefill-tiles) echo "cd bench && python3 prefill_tiles.py --tiles few" ;;
        w3) echo "cd bench && python3 genrec_throughput.py --quick" ;;
        w2) echo "cd bench && python3 sid_decode.py --quick" ;;
        w1) echo "cd bench && python3 wide_beam.py --quick --hf-tokens ''" ;;
        w4-shared) echo "cd bench && python3 recif_throughput.py --quick \
            --variants shared,shared-nocache" ;;
        fp8-quality) echo "cd bench && python3 fp8_quality.py --users 3000" ;;
        fp8-gemm) echo "cd bench && python3 fp8_gemm.py" ;;
        fp8-gpu-tests) echo "python3 -m pytest -q -p no:cacheprovider tests/kernels/fp8 \
            tests/kernels/layers/test_triton_fp8_layers.py \
            tests/services/decoder/model/test_fp8_fused_inputs.py \
            tests/services/decoder/model/test_fused_residual.py \
            tests/services/decoder/test_fp8_engine_gpu.py" ;;
        fp8-kv-gpu-tests) echo "python3 -m pytest -q -p no:cacheprovider tests/kernels/kv \
            tests/kernels/attention/test_fp8_kv.py tests/kernels/attention/test_fp8_kv_gpu.py \
            tests/kernels/fp8/test_triton_quantize.py tests/kernels/attention/test_triton_prefill.py \
            tests/kernels/attention/test_fp8_kv_engine_with_triton.py \
            tests/kernels/attention/test_fp8_probabilities.py \
            tests/services/decoder/kv tests/services/decoder/test_fp8_kv_engine_gpu.py" ;;
        w4-fp8-kv) echo "cd bench && python3 recif_throughput.py --quick --variants distinct \
            && python3 recif_throughput.py --quick --variants distinct --kv-dtype fp8 \
            --tag _fp8kv" ;;
        fp8-kv-quality) echo "cd bench && python3 fp8_quality.py --users 3000 \
            --quantization none --kv-dtype fp8" ;;
        fp8-all-quality) echo "cd bench && python3 fp8_quality.py --users 3000 --kv-dtype fp8" ;;
        w2-fp8) echo "cd bench && python3 sid_decode.py --quick $SEPARATE_PROFILE_ARGS && python3 \
            sid_decode.py --quick --quantization fp8 --kv-dtype fp8 --tag _fp8 $SEPARATE_PROFILE_ARGS" ;;
        w2-clock) echo "cd bench && W2='python3 sid_decode.py --contexts 5000 --host-clock \
            --reps ${WIDEBEAM_W2_REPS:-10}' && FP8='--quantization fp8 --kv-dtype fp8' \
            ; \$W2 --tag _bf16 ; \$W2 \$FP8 --tag _fp8 \
            ; \$W2 --quantization fp8 --tag _fp8w ; \$W2 --kv-dtype fp8 --tag _fp8kv \
            ; \$W2 \$FP8 --sync-debug --tag _fp8sync \
            ; \$W2 \$FP8 --profile 5000 --tag _fp8prof ; \$W2 --profile 5000 --tag _bf16prof \
            ; \$W2 --tag _bf16again" ;;
        prefill-limit) echo "cd bench && LIMIT='--max-prefill-graph-tokens \
            ${WIDEBEAM_PREFILL_LIMIT:-2048}' && FP8='--quantization fp8 --kv-dtype fp8' \
            && W2='python3 sid_decode.py --contexts 5000 --host-clock --reps 10' \
            && W4='python3 recif_throughput.py --quick --variants distinct' \
            ; \$W2 --tag _bf16 ; \$W2 \$LIMIT --tag _bf16lim \
            ; \$W2 \$FP8 --tag _fp8 ; \$W2 \$FP8 \$LIMIT --tag _fp8lim \
            ; \$W4 --tag _bf16 ; \$W4 \$LIMIT --tag _bf16lim \
            ; \$W4 \$FP8 --tag _fp8 ; \$W4 \$FP8 \$LIMIT --tag _fp8lim" ;;
        prefill-split) echo "cd bench && python3 prefill_graph_limit.py \
            --limits ${WIDEBEAM_SPLIT_LIMITS:-2048,2048+split,4096} \
            --rounds ${WIDEBEAM_SPLIT_ROUNDS:-10} --requests ${WIDEBEAM_SPLIT_REQUESTS:-360} \
            --concurrency ${WIDEBEAM_SPLIT_CONCURRENCY:-12}" ;;
        engine-gpu-tests) echo "python3 -m pytest -q -p no:cacheprovider \
            tests/kernels/attention/test_engine_with_triton.py \
            tests/services/decoder/test_engine_graphs_gpu.py \
            tests/services/decoder/test_warm_up_gpu.py" ;;
        w4-fp8) echo "cd bench && python3 recif_throughput.py --quick --variants distinct \
            $SEPARATE_PROFILE_ARGS && python3 recif_throughput.py --quick --variants distinct \
            --quantization fp8 --kv-dtype fp8 --tag _fp8 $SEPARATE_PROFILE_ARGS" ;;
        w3-fp8) echo "cd bench && python3 genrec_throughput.py --quick $SEPARATE_PROFILE_ARGS \
            && python3 genrec_throughput.py --quick --quantization fp8 --kv-dtype fp8 \
            --tag _fp8 $SEPARATE_PROFILE_ARGS" ;;
        w3-fp8-head) echo "$(step_command w3-fp8) && python3 genrec_throughput.py --quick \
            --quantization fp8 --kv-dtype fp8 --head-quantization fp8 --tag _fp8head \
            $SEPARATE_PROFILE_ARGS" ;;
        w4-fp8-head) echo "$(step_command w4-fp8) && python3 recif_throughput.py --quick \
            --variants distinct --quantization fp8 --kv-dtype fp8 --head-quantization fp8 \
            --tag _fp8head $SEPARATE_PROFILE_ARGS" ;;
        fp8-head-quality) echo "cd bench && python3 fp8_quality.py --users 3000 --kv-dtype fp8 \
            --head-quantization fp8" ;;
        w4-fp8-queries) echo "cd bench && for q in '' --kv-fp8-queries --kv-fp8-queries ''; do \
            python3 recif_throughput.py --quick --variants distinct --quantization fp8 \
            --kv-dtype fp8 --head-quantization fp8 \$q --tag _fq\${q:+1}; done" ;;
        w3-fp8-queries) echo "cd bench && for q in '' --kv-fp8-queries --kv-fp8-queries ''; do \
            python3 genrec_throughput.py --quantization fp8 --kv-dtype fp8 \
            --head-quantization fp8 \$q --tag _fq\${q:+1}; done" ;;
        w2-fp8-queries) echo "cd bench && for q in '' --kv-fp8-queries --kv-fp8-queries ''; do \
            python3 sid_decode.py --quick --contexts 1000,5000 --reps 10 --quantization fp8 \
            --kv-dtype fp8 \$q --tag _fq\${q:+1}; done" ;;
        fp8-queries-quality) echo "cd bench && python3 fp8_quality.py --users 3000 \
            --kv-dtype fp8 --head-quantization fp8 --kv-fp8-queries" ;;
        w4-fp8-probabilities) echo "cd bench && for p in '' --kv-fp8-probabilities \
            --kv-fp8-probabilities ''; do python3 recif_throughput.py --quick --variants distinct \
            --quantization fp8 --kv-dtype fp8 --head-quantization fp8 --kv-fp8-queries \$p \
            --tag _fp\${p:+1}; done" ;;
        w2-fp8-probabilities) echo "cd bench && for p in '' --kv-fp8-probabilities \
            --kv-fp8-probabilities ''; do python3 sid_decode.py --quick --contexts 1000,5000 \
            --reps 10 --quantization fp8 --kv-dtype fp8 --kv-fp8-queries \$p \
            --tag _fp\${p:+1}; done" ;;
        fp8-probabilities-quality) echo "cd bench && python3 fp8_quality.py --users 3000 \
            --kv-dtype fp8 --kv-fp8-queries --kv-fp8-probabilities" ;;
        *) return 1 ;;
    esac
}

default_limit() {
    case "$1" in
        gpu-tests | stack-timeline | decoder-startup) echo 300 ;; stack*) echo 260 ;; ab-stack | ab-tree) echo 420 ;; w1-shared | w1-split) echo 300 ;; w1-*) echo 180 ;; attention-gpu-tests) echo 240 ;; kernels-tree) echo 240 ;;
        fp8-quality) echo 240 ;; fp8-gemm) echo 300 ;;
        fp8-gpu-tests) echo 200 ;; fp8-kv-gpu-tests) echo 240 ;; w4-fp8-kv) echo 300 ;;
        fp8-kv-quality | fp8-all-quality | w2-fp8) echo 240 ;; w2-clock) echo 300 ;; kernels-fp8prefill) echo 90 ;; prefill-tiles) echo 300 ;; prefill-split) echo 420 ;; prefill-limit) echo 420 ;; w3-fp8 | w4-fp8) echo 300 ;;
        w3-fp8-head | fp8-head-quality) echo 360 ;; w4-fp8-head) echo 420 ;;
        w4-fp8-queries | w4-fp8-probabilities) echo 300 ;;
        fp8-queries-quality | fp8-probabilities-quality) echo 420 ;;
        w2-fp8-probabilities) echo 200 ;;
        w3-fp8-queries) echo 240 ;; w2-fp8-queries) echo 200 ;;
        w3) echo 150 ;; w1) echo 180 ;; w4-shared) echo 200 ;; kernels-prefix) echo 300 ;; *) echo 120 ;;
    esac
}

for spec in "$@"; do
    name=${spec%%=*}
    limit=$([ "$name" = "$spec" ] && default_limit "$name" || echo "${spec#*=}")
    if ! command=$(step_command "$name"); then
        echo "unknown step: $name" | tee -a "$OUT/setup.log"
        continue
    fi
    t0=$(date +%s)
    mkdir -p "$OUT/results/$name"
    OUT=$OUT/results/$name timeout "$limit" bash -c "$command" > "$OUT/$name.log" 2>&1
    echo "[$name] exit $? after $(( $(date +%s) - t0 )) s (limit $limit s)" >> "$OUT/$name.log"
done

cp -r "$WIDEBEAM_BENCH_LOGS" "$OUT/results/service-logs"
tar czf "$OUT/results.tgz" -C "$OUT" results && rm -rf "$OUT/results"
for spec in "$@"; do
    name=${spec%%=*}
    [ -f "$OUT/$name.log" ] && { echo "=== $name"; tail -n 25 "$OUT/$name.log"; }
done
