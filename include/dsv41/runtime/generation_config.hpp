// A model directory's generation_config.json (the Hugging Face file): the sampling defaults a host applies when a
// request gives none. Read fields: do_sample (false: greedy), temperature, top_k, top_p, min_p, max_new_tokens;
// others are ignored. No file: no defaults. A file that is not JSON, or a value of the wrong type or range, is an
// error (the caller decides whether to go on without it).
#pragma once
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include <dsv41/core/read_file.hpp>
#include <dsv41/core/status.hpp>
#include <dsv41/runtime/sampler.hpp>

namespace dsv41 {

struct GenerationDefaults {
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k, max_new_tokens;
};

inline Result<GenerationDefaults> parse_generation_config(const std::string& text, const std::string& where) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return error(Code::format_error, where + ": not a JSON object");
  GenerationDefaults g;
  auto real = [&](const char* k, double lo, double hi, std::optional<float>& out) -> Status {
    if (!j.contains(k) || j[k].is_null()) return Status::Ok();
    if (!j[k].is_number() || !(j[k].get<double>() >= lo && j[k].get<double>() <= hi))
      return error(Code::format_error, where + ": " + k + " must be a number in [" + std::to_string(lo) + ", " +
                                           std::to_string(hi) + "]");
    out = float(j[k].get<double>());
    return Status::Ok();
  };
  auto integer = [&](const char* k, int64_t lo, int64_t hi, std::optional<int>& out) -> Status {
    if (!j.contains(k) || j[k].is_null()) return Status::Ok();
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < lo || j[k].get<int64_t>() > hi)
      return error(Code::format_error, where + ": " + k + " must be an integer in [" + std::to_string(lo) + ", " +
                                           std::to_string(hi) + "]");
    out = int(j[k].get<int64_t>());
    return Status::Ok();
  };
  DSV41_TRY(real("temperature", 0, 100, g.temperature));
  DSV41_TRY(real("top_p", 0, 1, g.top_p));
  DSV41_TRY(real("min_p", 0, 1, g.min_p));
  DSV41_TRY(integer("top_k", 0, 1 << 30, g.top_k));
  DSV41_TRY(integer("max_new_tokens", 0, 1 << 30, g.max_new_tokens));
  if (j.contains("do_sample")) {
    if (!j["do_sample"].is_boolean()) return error(Code::format_error, where + ": do_sample must be true or false");
    if (!j["do_sample"].get<bool>()) g.temperature = 0.f;  // greedy, whatever temperature says
  }
  return Result<GenerationDefaults>(std::move(g));
}

inline Result<GenerationDefaults> load_generation_defaults(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationDefaults{};
  auto text = read_small_file(path, uintmax_t(1) << 20);
  if (!text.ok()) return text.status();
  return parse_generation_config(*text, path);
}

}  // namespace dsv41
