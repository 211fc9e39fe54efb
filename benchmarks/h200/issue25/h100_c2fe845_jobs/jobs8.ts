1796642082 # python tests/class_scale.py: mode gpu (NVIDIA H100 80GB HBM3 (sm_90)), 12 nbgrader processes at once
1796642088 released 7 lessons and collected 36 submissions in 7 s
1796642088 the machine's one-time preparation (Python bytecode, grader/bytecode.py): 0 s, not counted below (--cold counts it)
1796642088 
1796642088 lesson                   student                                  score   shard s  verdict
1796642096 04_tiled_kernel_2d       untouched                                 0/15         7  ok: untouched: 0
1796642096 05_flash_attention_v2    untouched                                 0/19         7  ok: untouched: 0
1796642097 06_flash_decoding        untouched                                 0/20         8  ok: untouched: 0
1796642113 03_per_query_kernel      untouched                                 0/10        17  ok: untouched: 0
1796642160 03_per_query_kernel      reference                                10/10        65  ok: reference: full marks
1796642166 06_flash_decoding        wrong_sdpa_in_wrapper                     0/20        77  ok: loses anti_cheat, decode_one_split
1796642168 04_tiled_kernel_2d       wrong_causal_off_by_one                   9/15        80  ok: loses causal
1796642169 03_per_query_kernel      wrong_missing_d_mask                      8/10        55  ok: loses odd_head_dim
1796642171 04_tiled_kernel_2d       reference                                15/15        83  ok: reference: full marks
1796642171 04_tiled_kernel_2d       wrong_wrapper_calls_sdpa                  0/15        77  ok: loses forward_divisible
1796642172 06_flash_decoding        wrong_combine_without_lse_weights        11/20        84  ok: loses split_kv
1796642174 06_flash_decoding        wrong_page_table_ignored                 16/20        86  ok: loses paged
1796642176 02_tiled_simulator       untouched                                 0/22         7  ok: untouched: 0
1796642176 03_per_query_kernel      wrong_missing_rescale                     1/10        16  ok: loses basic, m_ne_n, ragged_n
1796642177 05_flash_attention_v2    wrong_delta_missing                      11/19        89  ok: loses backward_dkdv, backward_dq
1796642178 06_flash_decoding        reference                                20/20        90  ok: reference: full marks
1796642182 03_per_query_kernel      wrong_torch_does_the_work                 0/10        16  ok: loses basic
1796642184 01_pytorch_attention     untouched                                 0/11         8  ok: untouched: 0
1796642184 05_flash_attention_v2    reference                                19/19        96  ok: reference: full marks
1796642190 05_flash_attention_v2    wrong_sdpa_does_the_work                 15/19       102  ok: loses anti_cheat
1796642195 00_setup                 untouched                                  0/7        11  ok: untouched: 0
1796642206 00_setup                 wrong_graded_function_renamed              0/7        10  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642216 00_setup                 reference                                  7/7        32  ok: reference: full marks
1796642217 01_pytorch_attention     reference                                11/11        43  ok: reference: full marks
1796642218 02_tiled_simulator       reference                                22/22        49  ok: reference: full marks
1796642218 01_pytorch_attention     wrong_causal_hides_diagonal               8/11        42  ok: loses attention_causal, attention_causal_rect
1796642219 01_pytorch_attention     wrong_causal_mask_on_cpu                  8/11        42  ok: loses attention_causal, attention_causal_rect
1796642219 01_pytorch_attention     wrong_sdpa_in_naive_attention             4/11        41  ok: loses attention_shapes
1796642220 00_setup                 wrong_contiguous_row_stride                6/7        30  ok: loses softmax_strided
1796642220 02_tiled_simulator       wrong_acc_not_rescaled                   16/22        49  ok: loses attention_divisible
1796642221 02_tiled_simulator       wrong_full_score_matrix                  17/22        49  ok: loses no_full_score_matrix
1796642221 00_setup                 wrong_kernel_never_launched                1/7        15  ok: loses softmax_power_of_two
1796642222 02_tiled_simulator       wrong_masked_keys_zero                   19/22        49  ok: loses attention_causal
1796642223 00_setup                 a_out_of_bounds_store                      1/7  41 (2 in shard)  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642223 00_setup                 z_reference_after_the_crash                7/7  41 (2 in shard)  ok: reference: full marks
1796642226 00_setup                 wrong_no_store_mask                        1/7        10  ok: loses softmax_ragged
1796642229 # python tests/class_scale.py: mode gpu (NVIDIA H100 80GB HBM3 (sm_90)), 12 nbgrader processes at once
1796642229 released 7 lessons and collected 36 submissions in 7 s
1796642229 the machine's one-time preparation (Python bytecode, grader/bytecode.py): 0 s, not counted below (--cold counts it)
1796642229 
1796642229 lesson                   student                                  score   shard s  verdict
1796642229 00_setup                 reference                                  7/7        32  ok: reference: full marks
1796642229 00_setup                 untouched                                  0/7        11  ok: untouched: 0
1796642229 00_setup                 wrong_no_store_mask                        1/7        10  ok: loses softmax_ragged
1796642229 00_setup                 wrong_contiguous_row_stride                6/7        30  ok: loses softmax_strided
1796642229 00_setup                 wrong_kernel_never_launched                1/7        15  ok: loses softmax_power_of_two
1796642229 00_setup                 wrong_graded_function_renamed              0/7        10  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642229 00_setup                 a_out_of_bounds_store                      1/7  41 (2 in shard)  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642229 00_setup                 z_reference_after_the_crash                7/7  41 (2 in shard)  ok: reference: full marks
1796642229 01_pytorch_attention     reference                                11/11        43  ok: reference: full marks
1796642229 01_pytorch_attention     untouched                                 0/11         8  ok: untouched: 0
1796642229 01_pytorch_attention     wrong_causal_hides_diagonal               8/11        42  ok: loses attention_causal, attention_causal_rect
1796642229 01_pytorch_attention     wrong_sdpa_in_naive_attention             4/11        41  ok: loses attention_shapes
1796642229 01_pytorch_attention     wrong_causal_mask_on_cpu                  8/11        42  ok: loses attention_causal, attention_causal_rect
1796642229 02_tiled_simulator       reference                                22/22        49  ok: reference: full marks
1796642229 02_tiled_simulator       untouched                                 0/22         7  ok: untouched: 0
1796642229 02_tiled_simulator       wrong_acc_not_rescaled                   16/22        49  ok: loses attention_divisible
1796642229 02_tiled_simulator       wrong_full_score_matrix                  17/22        49  ok: loses no_full_score_matrix
1796642229 02_tiled_simulator       wrong_masked_keys_zero                   19/22        49  ok: loses attention_causal
1796642229 03_per_query_kernel      reference                                10/10        65  ok: reference: full marks
1796642229 03_per_query_kernel      untouched                                 0/10        17  ok: untouched: 0
1796642229 03_per_query_kernel      wrong_missing_rescale                     1/10        16  ok: loses basic, m_ne_n, ragged_n
1796642229 03_per_query_kernel      wrong_missing_d_mask                      8/10        55  ok: loses odd_head_dim
1796642229 03_per_query_kernel      wrong_torch_does_the_work                 0/10        16  ok: loses basic
1796642229 04_tiled_kernel_2d       reference                                15/15        83  ok: reference: full marks
1796642229 04_tiled_kernel_2d       untouched                                 0/15         7  ok: untouched: 0
1796642229 04_tiled_kernel_2d       wrong_causal_off_by_one                   9/15        80  ok: loses causal
1796642229 04_tiled_kernel_2d       wrong_wrapper_calls_sdpa                  0/15        77  ok: loses forward_divisible
1796642229 05_flash_attention_v2    reference                                19/19        96  ok: reference: full marks
1796642229 05_flash_attention_v2    untouched                                 0/19         7  ok: untouched: 0
1796642229 05_flash_attention_v2    wrong_delta_missing                      11/19        89  ok: loses backward_dkdv, backward_dq
1796642229 05_flash_attention_v2    wrong_sdpa_does_the_work                 15/19       102  ok: loses anti_cheat
1796642229 06_flash_decoding        reference                                20/20        90  ok: reference: full marks
1796642229 06_flash_decoding        untouched                                 0/20         8  ok: untouched: 0
1796642229 06_flash_decoding        wrong_combine_without_lse_weights        11/20        84  ok: loses split_kv
1796642229 06_flash_decoding        wrong_page_table_ignored                 16/20        86  ok: loses paged
1796642229 06_flash_decoding        wrong_sdpa_in_wrapper                     0/20        77  ok: loses anti_cheat, decode_one_split
1796642229 graded one after another in 00_setup shard 0: a_out_of_bounds_store -> z_reference_after_the_crash
1796642229 
1796642229 36 submissions graded in 141 s of wall time: 15.3 submissions per minute (12 at once); 0 wrong grades
1796642229 slowest notebook: 05_flash_attention_v2 / wrong_sdpa_does_the_work, 102 s (its own nbgrader run)
1796642229 shards: 35, 1584 shard-seconds over 12 slots (an even spread would end at 132 s; the class took 141 s). The last to end:
1796642229   00_setup shard 6 (wrong_no_store_mask): 128 s -> 138 s
1796642229   00_setup shard 0 (a_out_of_bounds_store, z_reference_after_the_crash): 94 s -> 135 s
1796642229   02_tiled_simulator shard 4 (wrong_masked_keys_zero): 84 s -> 133 s
1796642229   00_setup shard 5 (wrong_kernel_never_launched): 117 s -> 133 s
1796642229   02_tiled_simulator shard 3 (wrong_full_score_matrix): 83 s -> 133 s
1796642229 CPU: the machine was busy 1649 CPU-seconds of the 2253 its 16 cores could give (73%); the rest is nbgrader, its kernels, the reference workers and the system
1796642229   00_setup                 judges      2 CPU-s, submissions' zygotes and workers     90 CPU-s; 50 submission kernels compiled or loaded (14 s), 13 distinct; 42 worker starts, 5.6 s each
1796642229   01_pytorch_attention     judges      6 CPU-s, submissions' zygotes and workers     91 CPU-s; 0 submission kernels compiled or loaded (0 s), 0 distinct; 36 worker starts, 14.4 s each
1796642229   02_tiled_simulator       judges     29 CPU-s, submissions' zygotes and workers    163 CPU-s; 0 submission kernels compiled or loaded (0 s), 0 distinct; 72 worker starts, 10.9 s each
1796642229   03_per_query_kernel      judges      5 CPU-s, submissions' zygotes and workers     87 CPU-s; 85 submission kernels compiled or loaded (28 s), 15 distinct; 35 worker starts, 12.5 s each
1796642229   04_tiled_kernel_2d       judges     27 CPU-s, submissions' zygotes and workers    177 CPU-s; 115 submission kernels compiled or loaded (118 s), 47 distinct; 38 worker starts, 21.0 s each
1796642229   05_flash_attention_v2    judges     41 CPU-s, submissions' zygotes and workers    329 CPU-s; 302 submission kernels compiled or loaded (271 s), 77 distinct; 45 worker starts, 19.9 s each
1796642229   06_flash_decoding        judges     57 CPU-s, submissions' zygotes and workers    263 CPU-s; 224 submission kernels compiled or loaded (143 s), 40 distinct; 58 worker starts, 21.8 s each
