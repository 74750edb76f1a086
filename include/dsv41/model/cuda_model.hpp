// Model<Config, Cuda>: the model on one GPU (model.hpp's one class over the CUDA backend, backend/cuda/ops.hpp).
// Same operations as on the CPU on device sequences (gpu::DeviceSequence), plus device-output overloads that never
// synchronize. Work runs on the stream given at load; the host-output overloads synchronize once, for their copy.
// Sequences move between backends with gpu::upload_state / gpu::download_state (the same cache bytes).
// Include it in a .cu file (nvcc).
#pragma once
#include <cuda_runtime.h>

#include <dsv41/backend/cuda/ops.hpp>
#include <dsv41/backend/cuda/sequence.hpp>
#include <dsv41/backend/cuda/snapshot.hpp>
#include <dsv41/backend/cuda/state_transfer.hpp>
#include <dsv41/model/model.hpp>

namespace dsv41 {

template <class Config = configs::Dynamic>
using CudaModel = Model<Config, Cuda>;

}  // namespace dsv41
