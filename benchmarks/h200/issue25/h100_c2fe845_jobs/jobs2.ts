1796641946 # python tests/class_scale.py: mode gpu (NVIDIA H100 80GB HBM3 (sm_90)), 12 nbgrader processes at once
1796641954 released 7 lessons and collected 36 submissions in 8 s
1796641954 the machine's one-time preparation (Python bytecode, grader/bytecode.py): 0 s, not counted below (--cold counts it)
1796641954 
1796641954 lesson                   student                                  score   shard s  verdict
1796641963 06_flash_decoding        untouched                                 0/20         7  ok: untouched: 0
1796641963 04_tiled_kernel_2d       untouched                                 0/15         8  ok: untouched: 0
1796641963 05_flash_attention_v2    untouched                                 0/19         8  ok: untouched: 0
1796641973 03_per_query_kernel      untouched                                 0/10        10  ok: untouched: 0
1796642009 03_per_query_kernel      reference                                10/10        47  ok: reference: full marks
1796642017 03_per_query_kernel      wrong_missing_d_mask                      8/10        44  ok: loses odd_head_dim
1796642017 04_tiled_kernel_2d       wrong_wrapper_calls_sdpa                  0/15        56  ok: loses forward_divisible
1796642019 06_flash_decoding        wrong_sdpa_in_wrapper                     0/20        65  ok: loses anti_cheat, decode_one_split
1796642020 04_tiled_kernel_2d       wrong_causal_off_by_one                   9/15        65  ok: loses causal
1796642028 06_flash_decoding        wrong_page_table_ignored                 16/20        73  ok: loses paged
1796642028 02_tiled_simulator       untouched                                 0/22         9  ok: untouched: 0
1796642028 04_tiled_kernel_2d       reference                                15/15        74  ok: reference: full marks
1796642030 06_flash_decoding        wrong_combine_without_lse_weights        11/20        76  ok: loses split_kv
1796642033 05_flash_attention_v2    wrong_delta_missing                      11/19        78  ok: loses backward_dkdv, backward_dq
1796642033 03_per_query_kernel      wrong_missing_rescale                     1/10        24  ok: loses basic, m_ne_n, ragged_n
1796642033 06_flash_decoding        reference                                20/20        79  ok: reference: full marks
1796642037 03_per_query_kernel      wrong_torch_does_the_work                 0/10        20  ok: loses basic
1796642037 01_pytorch_attention     untouched                                 0/11         8  ok: untouched: 0
1796642046 05_flash_attention_v2    reference                                19/19        91  ok: reference: full marks
1796642052 05_flash_attention_v2    wrong_sdpa_does_the_work                 16/19        97  ok: loses anti_cheat
1796642052 00_setup                 untouched                                  0/7         6  ok: untouched: 0
1796642056 01_pytorch_attention     reference                                11/11        28  ok: reference: full marks
1796642058 00_setup                 wrong_graded_function_renamed              0/7         6  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642060 02_tiled_simulator       reference                                22/22        42  ok: reference: full marks
1796642060 01_pytorch_attention     wrong_causal_hides_diagonal               8/11        27  ok: loses attention_causal, attention_causal_rect
1796642060 00_setup                 reference                                  7/7        23  ok: reference: full marks
1796642060 01_pytorch_attention     wrong_sdpa_in_naive_attention             4/11        27  ok: loses attention_shapes
1796642061 01_pytorch_attention     wrong_causal_mask_on_cpu                  8/11        28  ok: loses attention_causal, attention_causal_rect
1796642061 02_tiled_simulator       wrong_acc_not_rescaled                   16/22        41  ok: loses attention_divisible
1796642066 00_setup                 wrong_contiguous_row_stride                6/7        15  ok: loses softmax_strided
1796642066 02_tiled_simulator       wrong_full_score_matrix                  17/22        39  ok: loses no_full_score_matrix
1796642067 02_tiled_simulator       wrong_masked_keys_zero                   19/22        39  ok: loses attention_causal
1796642068 00_setup                 wrong_kernel_never_launched                1/7        12  ok: loses softmax_power_of_two
1796642071 00_setup                 a_out_of_bounds_store                      1/7  35 (2 in shard)  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642071 00_setup                 z_reference_after_the_crash                7/7  35 (2 in shard)  ok: reference: full marks
1796642071 00_setup                 wrong_no_store_mask                        1/7        14  ok: loses softmax_ragged
1796642075 # python tests/class_scale.py: mode gpu (NVIDIA H100 80GB HBM3 (sm_90)), 12 nbgrader processes at once
1796642075 released 7 lessons and collected 36 submissions in 8 s
1796642075 the machine's one-time preparation (Python bytecode, grader/bytecode.py): 0 s, not counted below (--cold counts it)
1796642075 
1796642075 lesson                   student                                  score   shard s  verdict
1796642075 00_setup                 reference                                  7/7        23  ok: reference: full marks
1796642075 00_setup                 untouched                                  0/7         6  ok: untouched: 0
1796642075 00_setup                 wrong_no_store_mask                        1/7        14  ok: loses softmax_ragged
1796642075 00_setup                 wrong_contiguous_row_stride                6/7        15  ok: loses softmax_strided
1796642075 00_setup                 wrong_kernel_never_launched                1/7        12  ok: loses softmax_power_of_two
1796642075 00_setup                 wrong_graded_function_renamed              0/7         6  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642075 00_setup                 a_out_of_bounds_store                      1/7  35 (2 in shard)  ok: loses softmax_fp16, softmax_power_of_two, softmax_ragged, softmax_stable, softmax_strided
1796642075 00_setup                 z_reference_after_the_crash                7/7  35 (2 in shard)  ok: reference: full marks
1796642075 01_pytorch_attention     reference                                11/11        28  ok: reference: full marks
1796642075 01_pytorch_attention     untouched                                 0/11         8  ok: untouched: 0
1796642075 01_pytorch_attention     wrong_causal_hides_diagonal               8/11        27  ok: loses attention_causal, attention_causal_rect
1796642075 01_pytorch_attention     wrong_sdpa_in_naive_attention             4/11        27  ok: loses attention_shapes
1796642075 01_pytorch_attention     wrong_causal_mask_on_cpu                  8/11        28  ok: loses attention_causal, attention_causal_rect
1796642075 02_tiled_simulator       reference                                22/22        42  ok: reference: full marks
1796642075 02_tiled_simulator       untouched                                 0/22         9  ok: untouched: 0
1796642075 02_tiled_simulator       wrong_acc_not_rescaled                   16/22        41  ok: loses attention_divisible
1796642075 02_tiled_simulator       wrong_full_score_matrix                  17/22        39  ok: loses no_full_score_matrix
1796642075 02_tiled_simulator       wrong_masked_keys_zero                   19/22        39  ok: loses attention_causal
1796642075 03_per_query_kernel      reference                                10/10        47  ok: reference: full marks
1796642075 03_per_query_kernel      untouched                                 0/10        10  ok: untouched: 0
1796642075 03_per_query_kernel      wrong_missing_rescale                     1/10        24  ok: loses basic, m_ne_n, ragged_n
1796642075 03_per_query_kernel      wrong_missing_d_mask                      8/10        44  ok: loses odd_head_dim
1796642075 03_per_query_kernel      wrong_torch_does_the_work                 0/10        20  ok: loses basic
1796642075 04_tiled_kernel_2d       reference                                15/15        74  ok: reference: full marks
1796642075 04_tiled_kernel_2d       untouched                                 0/15         8  ok: untouched: 0
1796642075 04_tiled_kernel_2d       wrong_causal_off_by_one                   9/15        65  ok: loses causal
1796642075 04_tiled_kernel_2d       wrong_wrapper_calls_sdpa                  0/15        56  ok: loses forward_divisible
1796642075 05_flash_attention_v2    reference                                19/19        91  ok: reference: full marks
1796642075 05_flash_attention_v2    untouched                                 0/19         8  ok: untouched: 0
1796642075 05_flash_attention_v2    wrong_delta_missing                      11/19        78  ok: loses backward_dkdv, backward_dq
1796642075 05_flash_attention_v2    wrong_sdpa_does_the_work                 16/19        97  ok: loses anti_cheat
1796642075 06_flash_decoding        reference                                20/20        79  ok: reference: full marks
1796642075 06_flash_decoding        untouched                                 0/20         7  ok: untouched: 0
1796642075 06_flash_decoding        wrong_combine_without_lse_weights        11/20        76  ok: loses split_kv
1796642075 06_flash_decoding        wrong_page_table_ignored                 16/20        73  ok: loses paged
1796642075 06_flash_decoding        wrong_sdpa_in_wrapper                     0/20        65  ok: loses anti_cheat, decode_one_split
1796642075 graded one after another in 00_setup shard 0: a_out_of_bounds_store -> z_reference_after_the_crash
1796642075 
1796642075 36 submissions graded in 120 s of wall time: 18.0 submissions per minute (12 at once); 0 wrong grades
1796642075 slowest notebook: 05_flash_attention_v2 / wrong_sdpa_does_the_work, 97 s (its own nbgrader run)
1796642075 shards: 35, 1322 shard-seconds over 12 slots (an even spread would end at 110 s; the class took 120 s). The last to end:
1796642075   00_setup shard 6 (wrong_no_store_mask): 104 s -> 117 s
1796642075   00_setup shard 0 (a_out_of_bounds_store, z_reference_after_the_crash): 82 s -> 117 s
1796642075   00_setup shard 5 (wrong_kernel_never_launched): 102 s -> 114 s
1796642075   02_tiled_simulator shard 4 (wrong_masked_keys_zero): 74 s -> 113 s
1796642075   02_tiled_simulator shard 3 (wrong_full_score_matrix): 73 s -> 112 s
1796642075 CPU: the machine was busy 1431 CPU-seconds of the 1925 its 16 cores could give (74%); the rest is nbgrader, its kernels, the reference workers and the system
1796642075   00_setup                 judges      2 CPU-s, submissions' zygotes and workers     72 CPU-s; 50 submission kernels compiled or loaded (13 s), 13 distinct; 42 worker starts, 1.0 s each
1796642075   01_pytorch_attention     judges      5 CPU-s, submissions' zygotes and workers     49 CPU-s; 0 submission kernels compiled or loaded (0 s), 0 distinct; 36 worker starts, 3.0 s each
1796642075   02_tiled_simulator       judges     25 CPU-s, submissions' zygotes and workers    101 CPU-s; 0 submission kernels compiled or loaded (0 s), 0 distinct; 72 worker starts, 1.9 s each
1796642075   03_per_query_kernel      judges      5 CPU-s, submissions' zygotes and workers     79 CPU-s; 85 submission kernels compiled or loaded (23 s), 15 distinct; 35 worker starts, 2.4 s each
1796642075   04_tiled_kernel_2d       judges     28 CPU-s, submissions' zygotes and workers    161 CPU-s; 115 submission kernels compiled or loaded (117 s), 47 distinct; 38 worker starts, 3.4 s each
1796642075   05_flash_attention_v2    judges     41 CPU-s, submissions' zygotes and workers    291 CPU-s; 302 submission kernels compiled or loaded (213 s), 77 distinct; 45 worker starts, 2.5 s each
1796642075   06_flash_decoding        judges     60 CPU-s, submissions' zygotes and workers    221 CPU-s; 224 submission kernels compiled or loaded (125 s), 40 distinct; 58 worker starts, 3.6 s each
