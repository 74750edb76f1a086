// Safetensors reader (memory-mapped, lazy, fully validated) and a small writer. Host only: uses
// nlohmann-json and POSIX mmap, so keep it out of .cu translation units.
//
// The parts: safetensors_types.hpp (DType, TensorView), safetensors_reader.hpp (File),
// safetensors_checkpoint.hpp (Checkpoint, index.json), safetensors_writer.hpp (write).
#pragma once
#include <dsv41/io/safetensors_checkpoint.hpp>
#include <dsv41/io/safetensors_reader.hpp>
#include <dsv41/io/safetensors_types.hpp>
#include <dsv41/io/safetensors_writer.hpp>
