// placeholder so the layer library is never empty
namespace kvasir { int sample_layer_anchor = 0; }
