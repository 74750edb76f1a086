#!/usr/bin/env bash
# The C API with device "cuda" on the GPU machine, built with plain nvcc/g++ (no CMake packages there):
# libdsv41_c objects (c_api.cpp + c_api_cuda.cu), the [gpu][c_api] Catch2 case and the frame_loop example.
#   bash tools/gpu/c_api_gpu.sh            # build, run [c_api] and frame_loop on cuda
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${OUTDIR:-build/gpu/c_api}
mkdir -p "$B"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
INC="-Iinclude -I.devdeps/include"
GEN="-gencode=arch=compute_90a,code=sm_90a"
LIB=/usr/lib/x86_64-linux-gnu/libutf8proc.a
[[ -f $LIB ]] || LIB=.devdeps/lib/libutf8proc.a
CUDA_LIB=$(dirname "$(dirname "$NVCC")")/lib64
g++ -std=c++20 -O2 -DDSV41_C_HAVE_CUDA=1 $INC -c src/c_api.cpp -o "$B/c_api.o" &
$NVCC -std=c++20 --expt-relaxed-constexpr $GEN -O3 $INC -c src/c_api_cuda.cu -o "$B/c_api_cuda.o" &
g++ -std=c++20 -O2 $INC -DDSV41_TEST_DATA="\"$PWD/tests/data\"" -c tests/gpu/test_c_api_gpu.cpp -o "$B/test.o" &
g++ -std=c++20 -O2 $INC -c tests/catch_main.cpp -o "$B/catch_main.o" &
g++ -std=c++20 -O2 $INC -c examples/frame_loop/main.cpp -o "$B/frame_loop.o" &
wait
$NVCC $GEN "$B/test.o" "$B/catch_main.o" "$B/c_api.o" "$B/c_api_cuda.o" $LIB -lcublasLt -o "$B/c_api_gpu_tests"
$NVCC $GEN "$B/frame_loop.o" "$B/c_api.o" "$B/c_api_cuda.o" $LIB -lcublasLt -o "$B/frame_loop"
"$B/c_api_gpu_tests" "[c_api]"
"$B/frame_loop" models/dsv41-tiny-py 3 4000 cuda
