// The README demo: causal grouped-query attention with dynamic batch and
// sequence lengths (8 query heads share 2 key/value heads, head dim 64).
func.func @attention(%q: tensor<?x?x8x64xf16>, %k: tensor<?x?x2x64xf16>,
                     %v: tensor<?x?x2x64xf16>)
    -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal}
      : (tensor<?x?x8x64xf16>, tensor<?x?x2x64xf16>, tensor<?x?x2x64xf16>)
      -> (tensor<?x?x8x64xf16>, tensor<?x8x?xf32>)
  return %o, %lse : tensor<?x?x8x64xf16>, tensor<?x8x?xf32>
}
