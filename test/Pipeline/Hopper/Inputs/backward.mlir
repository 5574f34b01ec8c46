// Backward functions (one fa3.attention_grad each) for the Hopper PTX tests.

func.func @bwd_d64_causal(%do: tensor<?x?x8x64xbf16>, %q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %o: tensor<?x?x8x64xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>
}

func.func @bwd_d128(%do: tensor<?x?x16x128xbf16>, %q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>, %o: tensor<?x?x16x128xbf16>, %lse: tensor<?x16x?xf32>) -> (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse  : (tensor<?x?x16x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) -> (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>
}

func.func @bwd_d256_causal(%do: tensor<?x?x8x256xf16>, %q: tensor<?x?x8x256xf16>, %k: tensor<?x?x2x256xf16>, %v: tensor<?x?x2x256xf16>, %o: tensor<?x?x8x256xf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<?x?x8x256xf16>, tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x8x256xf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>)
  return %dq, %dk, %dv : tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>
}

func.func @bwd_d128_window_softcap(%do: tensor<?x?x4x128xf16>, %q: tensor<?x?x4x128xf16>, %k: tensor<?x?x4x128xf16>, %v: tensor<?x?x4x128xf16>, %o: tensor<?x?x4x128xf16>, %lse: tensor<?x4x?xf32>) -> (tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {window = array<i64: 64, 32>, softcap = 30.0 : f32} : (tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x4x?xf32>) -> (tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>)
  return %dq, %dk, %dv : tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>, tensor<?x?x4x128xf16>
}

func.func @bwd_d128_mha_causal(%do: tensor<?x?x4x128xbf16>, %q: tensor<?x?x4x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>, %o: tensor<?x?x4x128xbf16>, %lse: tensor<?x4x?xf32>) -> (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal} : (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x4x?xf32>) -> (tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>
}
