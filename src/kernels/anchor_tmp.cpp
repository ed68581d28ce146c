// placeholder so the layer library is never empty
namespace kvasir { int kernels_layer_anchor = 0; }
