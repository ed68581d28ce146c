// placeholder so the layer library is never empty
namespace kvasir { int model_layer_anchor = 0; }
