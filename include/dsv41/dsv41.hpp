// Umbrella header: configurations, the model, its states. Compiles in .cpp and .cu translation units.
#pragma once
#include <dsv41/config/accounting.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/presets.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/model/model.hpp>
#include <dsv41/backend/cpu/sequence.hpp>
