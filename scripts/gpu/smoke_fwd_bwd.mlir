func.func @fwd_bwd(%q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x2x128xbf16>, %v: tensor<?x?x2x128xbf16>, %do: tensor<?x?x4x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>, tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) {
  %o, %lse = fa3.attention %q, %k, %v {causal} : (tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>) -> (tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>)
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) -> (tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>)
  return %o, %lse, %dq, %dk, %dv : tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>, tensor<?x?x4x128xbf16>, tensor<?x?x2x128xbf16>, tensor<?x?x2x128xbf16>
}
