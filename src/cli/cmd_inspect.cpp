// `kvasir inspect MODEL`: metadata and tensor table.
#include <cstdio>

#include "cli/commands.h"
#include "cli/common.h"
#include "format/gguf.h"
#include "format/mapped_file.h"

namespace kvasir::cli {

void register_inspect(CLI::App& app, Handler& handler) {
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's metadata and tensor table");
  auto path = std::make_shared<std::string>();
  auto max_items = std::make_shared<size_t>(8);
  cmd->add_option("model", *path, "GGUF file")->required();
  cmd->add_option("--max-items", *max_items, "Array items to show per key");
  cmd->callback([&handler, path, max_items] {
    handler = [path, max_items] {
      auto file = MappedFile::open(model_path(*path));
      if (!file) { std::fprintf(stderr, "error: %s\n", file.error().c_str()); return 1; }
      auto g = gguf::parse(file->bytes());
      if (!g) { std::fprintf(stderr, "error: %s: %s\n", path->c_str(), g.error().c_str()); return 1; }
      std::printf("GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu, data at byte %llu\n", g->version,
                  g->kv.size(), g->tensors.size(), (unsigned long long)g->alignment,
                  (unsigned long long)g->data_offset);
      for (const auto& kv : g->kv) {
        std::string type(gguf::value_type_name(kv.value.type));
        if (kv.value.type == gguf::ValueType::ARRAY) type += "<" + std::string(gguf::value_type_name(kv.value.elem_type)) + ">";
        std::printf("  %-40s %-14s %s\n", kv.key.c_str(), type.c_str(), kv.value.to_display(*max_items).c_str());
      }
      std::printf("\n  %-40s %-6s %-26s %12s\n", "tensor", "type", "shape", "bytes");
      uint64_t total = 0;
      for (const auto& t : g->tensors) {
        std::string shape;
        for (int d = 0; d < t.n_dims; ++d) shape += (d ? " x " : "") + std::to_string(t.ne[d]);
        std::printf("  %-40s %-6s %-26s %12llu\n", t.name.c_str(), std::string(dtype_name(t.type)).c_str(),
                    shape.c_str(), (unsigned long long)t.nbytes);
        total += t.nbytes;
      }
      std::printf("  total tensor bytes: %llu (%.2f MiB)\n", (unsigned long long)total, total / 1048576.0);
      return 0;
    };
  });
}

}  // namespace kvasir::cli
