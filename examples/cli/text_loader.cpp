// load_text_model (text_loader.hpp): the CPU engine, TextEngineOf<Model<>>, is instantiated in this unit only; the
// commands that load a model (generate, chat, serve, perplexity) see the TextEngine interface.
#include "text_loader.hpp"

namespace dsv41::cli {

Result<std::unique_ptr<TextEngine>> load_text_model(const LoadArgs& a) {
  if (a.device == "cuda") {
#if DSV41_CLI_CUDA
    return load_cuda_engine(a);
#else
    return error(Code::unsupported, "this dsv41 was built without CUDA");
#endif
  }
  LoadOptions lo;
  if (a.progress) lo.progress = print_progress;
  auto m = Model<>::load(a.model_dir, lo);
  if (!m.ok()) return m.status();
  auto tok = load_tokenizer(a);
  if (!tok.ok()) return tok.status();
  auto e = std::make_unique<TextEngineOf<Model<>>>(std::move(m).value());
  DSV41_TRY(e->init(std::move(tok).value()));
  return Result<std::unique_ptr<TextEngine>>(std::move(e));
}

}  // namespace dsv41::cli
