// Umbrella header for host code: configurations, the model, its states. (Not for .cu files: it
// includes nlohmann-json; CUDA code includes the numeric/ and cuda/ headers it needs.)
#pragma once
#include <dsv41/config/accounting.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/presets.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/model/state.hpp>
