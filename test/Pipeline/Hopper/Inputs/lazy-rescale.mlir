// Forwards with lazy rescaling (#fa3.schedule rescale_threshold) for the Hopper PTX tests.
func.func @lr_d128(%q: tensor<?x?x16x128xbf16>, %k: tensor<?x?x16x128xbf16>, %v: tensor<?x?x16x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v {causal, schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, rescale_threshold = 8>} : (tensor<?x?x16x128xbf16>, tensor<?x?x16x128xbf16>, tensor<?x?x16x128xbf16>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}
func.func @lr_fp8(%q: tensor<?x?x16x128xf8E4M3FN>, %k: tensor<?x?x16x128xf8E4M3FN>, %v: tensor<?x?x16x128xf8E4M3FN>, %qd: tensor<?x16xf32>, %kd: tensor<?x16xf32>, %vd: tensor<?x16xf32>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>) {
  %o, %lse = fa3.attention %q, %k, %v, %qd, %kd, %vd {schedule = #fa3.schedule<block_m = 128, block_n = 128, stages = 2, consumer_wgs = 2, producer_regs = 24, consumer_regs = 240, pingpong = true, intra_wg_overlap = true, persistent = false, cluster = 1, rescale_threshold = 4>} : (tensor<?x?x16x128xf8E4M3FN>, tensor<?x?x16x128xf8E4M3FN>, tensor<?x?x16x128xf8E4M3FN>, tensor<?x16xf32>, tensor<?x16xf32>, tensor<?x16xf32>) -> (tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>)
  return %o, %lse : tensor<?x?x16x128xbf16>, tensor<?x16x?xf32>
}
