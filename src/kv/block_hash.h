// Chained block hashes for the prefix cache: hash(block) = H(parent hash, the block's tokens), and the
// chain starts from a root hash of (model identity, tenant salt). Equal hashes therefore mean "very
// probably the same prefix under the same model and tenant"; the prefix cache still compares the
// stored tokens, parent and salt, so a collision never aliases KV.
//
// The hash is our own (64-bit, splitmix-style mixing over token pairs), not xxhash: no dependency,
// and its quality only affects hit rate, never correctness.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace kvasir::kv {

using BlockHash = uint64_t;

// Injectable so tests can force collisions.
using BlockHasher = std::function<BlockHash(BlockHash parent, std::span<const int32_t> tokens)>;

// Default block hash.
BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens);
// Root of a chain: the model identity and the request's cache salt (empty: no salt).
BlockHash hash_root(std::string_view model_id, std::string_view salt);

}  // namespace kvasir::kv
