// A training step's attention: the forward, then the backward on the
// forward's O and LSE with the incoming gradient dO. Causal GQA (8 query
// heads share 2 key/value heads), head dim 64, dynamic batch and lengths.
// fa3-run runs it on the CPU, and on the GPU as two launch sequences whose
// intermediate O and LSE stay on the device.
func.func @train_step(%q: tensor<?x?x8x64xbf16>, %k: tensor<?x?x2x64xbf16>,
                      %v: tensor<?x?x2x64xbf16>, %do: tensor<?x?x8x64xbf16>)
    -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>, tensor<?x?x8x64xbf16>,
        tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>) {
  %o, %lse = fa3.attention %q, %k, %v {causal}
      : (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
      -> (tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
  %dq, %dk, %dv = fa3.attention_grad %do, %q, %k, %v, %o, %lse {causal}
      : (tensor<?x?x8x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>,
         tensor<?x?x2x64xbf16>, tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>)
      -> (tensor<?x?x8x64xbf16>, tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>)
  return %o, %lse, %dq, %dk, %dv
      : tensor<?x?x8x64xbf16>, tensor<?x8x?xf32>, tensor<?x?x8x64xbf16>,
        tensor<?x?x2x64xbf16>, tensor<?x?x2x64xbf16>
}
