// Forward attention functions the Hopper tests compile: head dims 64, 128
// and 256, causal and not, with MHA and GQA head counts.

func.func @d64_full(%q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x8x64xbf16>, %v: tensor<?x?x8x64xbf16>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}

func.func @d64_causal(%q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x8x64xbf16>, %v: tensor<?x?x8x64xbf16>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>) -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>
}

func.func @d128_full(%q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}

func.func @d128_causal(%q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}

func.func @d256_full(%q: tensor<?x?x8x256xbf16>, %k: tensor<?x?x2x256xbf16>, %v: tensor<?x?x2x256xbf16>) -> (tensor<?x?x8x256xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v : (tensor<?x?x8x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x2x256xbf16>) -> (tensor<?x?x8x256xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x256xbf16>, tensor<?x8x?xf32>
}

func.func @d256_causal(%q: tensor<?x?x8x256xbf16>, %k: tensor<?x?x2x256xbf16>, %v: tensor<?x?x2x256xbf16>) -> (tensor<?x?x8x256xbf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x8x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x2x256xbf16>) -> (tensor<?x?x8x256xbf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x256xbf16>, tensor<?x8x?xf32>
}

// A window unbounded on the left: the kernel name must stay a valid symbol.
func.func @d256_window(%q: tensor<?x?x8x256xf16>, %k: tensor<?x?x2x256xf16>, %v: tensor<?x?x2x256xf16>) -> (tensor<?x?x8x256xf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {window = array<i64: -1, 64>} : (tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>) -> (tensor<?x?x8x256xf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x256xf16>, tensor<?x8x?xf32>
}
