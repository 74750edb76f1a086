#!/usr/bin/env bash
# Session 17 run 2: what bounds the decode expert GEMMs. ncu metrics (time, DRAM, issue, occupancy, stall reasons per
# issued instruction) of the routed w1/w3 FP4 GEMM at T=1 and T=64, register kernel and streaming KS=8, from
# bench/gemm_stream.cu (build/gpu/gemm_stream moe: 28 launches per kernel and T, T = 1, 8, 64 in that order).
#   bash tools/gpu/stream_ncu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)}
[[ -x build/gpu/gemm_stream ]] || $NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 \
  -Iinclude bench/gemm_stream.cu -lcublasLt -o build/gpu/gemm_stream
S=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum
M=$M,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active
M=$M,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__average_warp_latency_per_inst_issued.ratio,lts__t_sector_hit_rate.pct
for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle not_selected selected \
         dispatch_stall no_instruction tex_throttle drain branch_resolving barrier imc_miss; do
  M=$M,${S}_${r}_per_issue_active.ratio
done
for spec in "skinny_gemm_kernelILNS0_4WFmtE1ELb1ELi2E 5 T=1-register" "stream_gemm_kernelILNS0_4WFmtE1ELb1ELi8E 5 T=1-stream8" \
            "skinny_gemm_kernelILNS0_4WFmtE1ELb1ELi2E 61 T=64-register" "stream_gemm_kernelILNS0_4WFmtE1ELb1ELi8E 61 T=64-stream8"; do
  set -- $spec
  echo "== $3"
  timeout 150 $NCU --clock-control none -k regex:$1 --launch-skip $2 --launch-count 1 --metrics $M \
    build/gpu/gemm_stream moe 2>&1 | grep -E "^\s+(gpu__|dram__|sm__|smsp__|lts__)" | \
    sed -E 's/smsp__average_warps_issue_stalled_/stall_/; s/_per_issue_active.ratio//; s/ +/ /g'
done
