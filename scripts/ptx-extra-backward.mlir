// Backward configurations beyond test/Pipeline/Hopper's, for scripts/dump-hopper-ptx.sh
// (d64/d128/d256, GQA, causal, window, softcap, deterministic, f16).

func.func @bwd_d64_mha(%do: tensor<?x?x8x64xbf16>, %q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x8x64xbf16>, %v: tensor<?x?x8x64xbf16>, %o: tensor<?x?x8x64xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>
}

func.func @bwd_d64_causal_gqa_det(%do: tensor<?x?x8x64xbf16>, %q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>, %v: tensor<?x?x2x64xbf16>, %o: tensor<?x?x8x64xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, deterministic} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>
}

func.func @bwd_d256_f16_gqa(%do: tensor<?x?x8x256xf16>, %q: tensor<?x?x8x256xf16>, %k: tensor<?x?x2x256xf16>, %v: tensor<?x?x2x256xf16>, %o: tensor<?x?x8x256xf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {} : (tensor<?x?x8x256xf16>, tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x8x256xf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>)
  return %dq, %dk, %dv : tensor<?x?x8x256xf16>, tensor<?x?x2x256xf16>, tensor<?x?x2x256xf16>
}

func.func @bwd_d128_causal_det_gqa(%do: tensor<?x?x16x128xbf16>, %q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x4x128xbf16>, %v: tensor<?x?x4x128xbf16>, %o: tensor<?x?x16x128xbf16>, %lse: tensor<?x16x?xf32>) -> (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, deterministic} : (tensor<?x?x16x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) -> (tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x16x128xbf16>, tensor<?x?x4x128xbf16>, tensor<?x?x4x128xbf16>
}

func.func @bwd_d128_softcap(%do: tensor<?x?x8x128xbf16>, %q: tensor<?x?x8x128xbf16>, %k: tensor<?x?x8x128xbf16>, %v: tensor<?x?x8x128xbf16>, %o: tensor<?x?x8x128xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {softcap = 20.0 : f32} : (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>, tensor<?x?x8x128xbf16>
}

func.func @bwd_d64_window_f16(%do: tensor<?x?x4x64xf16>, %q: tensor<?x?x4x64xf16>, %k: tensor<?x?x4x64xf16>, %v: tensor<?x?x4x64xf16>, %o: tensor<?x?x4x64xf16>, %lse: tensor<?x4x?xf32>) -> (tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {window = array<i64: 128, 64>} : (tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x4x?xf32>) -> (tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>)
  return %dq, %dk, %dv : tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>, tensor<?x?x4x64xf16>
}

func.func @bwd_d256_det(%do: tensor<?x?x4x256xbf16>, %q: tensor<?x?x4x256xbf16>, %k: tensor<?x?x4x256xbf16>, %v: tensor<?x?x4x256xbf16>, %o: tensor<?x?x4x256xbf16>, %lse: tensor<?x4x?xf32>) -> (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {deterministic} : (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x4x?xf32>) -> (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>)
  return %dq, %dk, %dv : tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>
}

func.func @bwd_d64_softcap_causal(%do: tensor<?x?x8x64xbf16>, %q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x8x64xbf16>, %v: tensor<?x?x8x64xbf16>, %o: tensor<?x?x8x64xbf16>, %lse: tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, softcap = 30.0 : f32} : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>) -> (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>)
  return %dq, %dk, %dv : tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>
}

func.func @bwd_d256_causal_softcap(%do: tensor<?x?x4x256xbf16>, %q: tensor<?x?x4x256xbf16>, %k: tensor<?x?x2x256xbf16>, %v: tensor<?x?x2x256xbf16>, %o: tensor<?x?x4x256xbf16>, %lse: tensor<?x4x?xf32>) -> (tensor<?x?x4x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x2x256xbf16>) {
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal, softcap = 30.0 : f32} : (tensor<?x?x4x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x4x256xbf16>, tensor<?x4x?xf32>) -> (tensor<?x?x4x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x2x256xbf16>)
  return %dq, %dk, %dv : tensor<?x?x4x256xbf16>, tensor<?x?x2x256xbf16>, tensor<?x?x2x256xbf16>
}
