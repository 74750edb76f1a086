// The glue kernels of the CUDA forward pass and the shape-generic fallbacks, by block (kernels/glue_*.cuh).
#pragma once
#include <dsv41/backend/cuda/kernels/glue_attention.cuh>
#include <dsv41/backend/cuda/kernels/glue_common.cuh>
#include <dsv41/backend/cuda/kernels/glue_dspark.cuh>
#include <dsv41/backend/cuda/kernels/glue_linear.cuh>
#include <dsv41/backend/cuda/kernels/glue_unit.cuh>
