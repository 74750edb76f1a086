#!/usr/bin/env bash
# Session 17 run 2: what bounds the decode expert GEMMs. ncu metrics (time, DRAM, issue, occupancy, stall reasons per
# issued instruction) of the routed w1/w3 FP4 GEMM at T=1 and T=64, register kernel and streaming KS=8, from
# bench/gemm_stream.cu (build/gpu/gemm_stream moe: 28 launches per variant and T, T = 1, 8, 64 in that order; the KS=8
# kernel serves 3 variants: whole K, split 2, split 4).
#   bash tools/gpu/stream_ncu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)}
[[ -x build/gpu/gemm_stream ]] || $NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 \
  -Iinclude bench/gemm_stream.cu -lcublasLt -o build/gpu/gemm_stream
S=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__average_warp_latency_per_inst_issued.ratio,lts__t_sector_hit_rate.pct,launch__grid_size
M=$M,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem
M=$M,sm__warps_active.avg.per_cycle_active,smsp__cycles_active.avg.pct_of_peak_sustained_elapsed
for p in alu fma fmaheavy lsu fp16 xu tensor_op_hmma uniform adu cbu; do M=$M,smsp__inst_executed_pipe_$p.sum; done
for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle not_selected selected \
         dispatch_stall no_instruction tex_throttle drain branch_resolving barrier imc_miss; do
  M=$M,${S}_${r}_per_issue_active.ratio
done
SPECS=${SPECS:-"skinny_gemm_kernelILNS0_4WFmtE1ELb1ELi2E:5:T=1-register stream_gemm_kernelILNS0_4WFmtE1ELb1ELi8E:5:T=1-stream8 skinny_gemm_kernelILNS0_4WFmtE1ELb1ELi2E:61:T=64-register stream_gemm_kernelILNS0_4WFmtE1ELb1ELi8E:173:T=64-stream8"}
for spec in $SPECS; do
  spec=${spec//:/ }
  set -- $spec
  echo "== $3"
  timeout 150 $NCU --clock-control none --kernel-name-base mangled -k regex:$1 --launch-skip $2 --launch-count 1 \
    --metrics $M build/gpu/gemm_stream moe > build/ncu_$3.log 2>&1
  grep -E "^\s+(gpu__|dram__|sm__|smsp__|lts__)" build/ncu_$3.log | \
    sed -E 's/smsp__average_warps_issue_stalled_/stall_/; s/_per_issue_active.ratio//; s/ +/ /g' || tail -5 build/ncu_$3.log
done
# SASS instruction mix of the two kernels (whole function; the K loop dominates).
CUOBJDUMP=$(dirname "$NVCC")/cuobjdump
for k in skinny_gemm_kernelILNS0_4WFmtE1ELb1ELi2E stream_gemm_kernelILNS0_4WFmtE1ELb1ELi8E; do
  $CUOBJDUMP -sass build/gpu/gemm_stream | awk -v k="$k" '/Function :/ {on = index($0, k) > 0} on' > build/sass_$k.txt
  echo "== SASS $k: $(grep -cE '^\s+/\*[0-9a-f]{4}\*/' build/sass_$k.txt) instructions"
  grep -oE '^\s+/\*[0-9a-f]{4}\*/\s+(@!?U?P[0-9T] )?[A-Z0-9]+' build/sass_$k.txt | \
    awk '{print $NF}' | sort | uniq -c | sort -rn | head -16 | tr '\n' ' '; echo
done
