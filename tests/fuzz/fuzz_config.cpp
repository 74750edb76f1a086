// config.json → ModelShape (parse_config, validate_shape), then what a loader and `inspect` compute from an accepted
// shape (expected_tensors, cache_bytes, count_params, the schedule): refused or accepted, never a crash, an overflow
// (UBSan) or a huge allocation.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include <dsv41/config/accounting.hpp>
#include <dsv41/config/parse_config.hpp>
#include <dsv41/config/schedule.hpp>
#include <dsv41/config/tensors.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  auto s = dsv41::parse_config(j);
  if (!s.ok() || !dsv41::validate_shape(*s).ok()) return 0;
  (void)dsv41::expected_tensors(*s);
  (void)dsv41::cache_bytes(*s);
  (void)dsv41::count_params(*s);
  (void)dsv41::make_schedule(*s);
  return 0;
}
