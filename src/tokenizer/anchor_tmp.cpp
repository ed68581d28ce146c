// placeholder so the layer library is never empty
namespace kvasir { int tokenizer_layer_anchor = 0; }
