// placeholder so the layer library is never empty
namespace kvasir { int chat_layer_anchor = 0; }
