"""What the judge says, in each edition's language (issue 14: a Chinese notebook gets Chinese feedback).

The judge's own sentences live here; the checks of each lesson say theirs with `ctx.t(english, chinese)` and give
their titles in both (`@lesson.check(points, title, zh=...)`); the visible checks' words are in
grader/notebook_checks.py. The language is the submission's (grader.editions.language_of).
"""

MESSAGES = {
    "ok": {"en": "ok", "zh": "通过"},
    "timed_out": {"en": "timed out after {seconds:.0f} s (an endless loop, or a kernel that never finishes?); the "
                        "process running your code was stopped",
                  "zh": "{seconds:.0f} 秒后超时（死循环，或者一个永远不结束的 kernel？）；运行你代码的进程已被终止"},
    "hung": {"en": "{what} ran for {seconds:.0f} s without returning (Triton's compile time not counted; the "
                   "reference solution needs a few seconds at most): an endless loop, or a kernel that never finishes? "
                   "The process running your code was stopped, and every other call of {what} gets {short:.0f} s",
             "zh": "{what} 运行了 {seconds:.0f} 秒还没有返回（不算 Triton 的编译时间；参考解最多只需几秒）：死循环，"
                   "还是一个永远不结束的 kernel？运行你代码的进程已被终止，之后对 {what} 的每次调用只有 {short:.0f} 秒"},
    "short_after_hang": {"en": "{what} did not return within {short:.0f} s: it already hung in the check `{check}` "
                               "(no return in {seconds:.0f} s), so every other call of it gets {short:.0f} s. Fix "
                               "that endless loop first",
                         "zh": "{what} 在 {short:.0f} 秒内没有返回：它在检查 `{check}` 中已经卡住过（{seconds:.0f} 秒"
                               "没有返回），所以之后对它的每次调用只有 {short:.0f} 秒。请先修好那个死循环"},
    "start_failed": {"en": "the process that runs your code could not set itself up ({error}): this torch or Triton "
                           "may not be one the course supports (the set-up cell says which are)",
                     "zh": "运行你代码的进程无法完成初始化（{error}）：这个 torch 或 Triton 的版本可能不在课程支持的范围内"
                           "（设置单元格会说明支持哪些版本）"},
    "top_level_code": {"en": "the notebook's top-level code (its definitions)", "zh": "笔记本的顶层代码（它的定义）"},
    "too_large": {"en": "your code sent back {megabytes:.0f} MB during `{op}`, more than the {limit:.0f} MB a check "
                        "accepts; the process was stopped",
                  "zh": "你的代码在 `{op}` 中返回了 {megabytes:.0f} MB，超过了一个检查接受的 {limit:.0f} MB；进程已被终止"},
    "not_plain": {"en": "the process running your code sent back something that is not plain data during `{op}` "
                        "({error}); it was stopped",
                  "zh": "运行你代码的进程在 `{op}` 中返回了不是纯数据的东西（{error}）；进程已被终止"},
    "died": {"en": "the process running your code died ({why}) during `{op}`; a crash, os._exit() or an out-of-bounds "
                   "store does this",
             "zh": "运行你代码的进程在 `{op}` 中死掉了（{why}）；崩溃、os._exit() 或越界写入会导致这种情况"},
    "last_output": {"en": ". Its last output:\n{tail}", "zh": "。它最后的输出：\n{tail}"},
    "malformed": {"en": "the process running your code sent back a malformed reply during `{op}`; it was stopped",
                  "zh": "运行你代码的进程在 `{op}` 中返回了格式错误的回复；进程已被终止"},
    "exit_status": {"en": "exit status {code}", "zh": "退出码 {code}"},
    "signal": {"en": "killed by signal {number}, {name}", "zh": "被信号 {number}（{name}）终止"},
    "out_of_bounds": {"en": ": a memory access out of bounds", "zh": "：内存访问越界"},
    "malformed_record": {"en": "the process running `{name}` sent back a malformed record ({what}); was the grading "
                               "process tampered with?",
                         "zh": "运行 `{name}` 的进程返回了格式错误的记录（{what}）；评分进程是否被篡改了？"},
    "raised": {"en": "your code raised {error}", "zh": "你的代码抛出了异常 {error}"},
    "input_changed": {"en": "`{name}` changed its input argument {index} in place, or stored past its end (the memory "
                            "around each input is checked too); inputs must stay unchanged",
                      "zh": "`{name}` 原地修改了第 {index} 个输入参数，或者写到了它的末尾之外（每个输入周围的内存也会检查）；"
                            "输入必须保持不变"},
    "access_outside": {"en": "`{kernel}` (launched by `{name}`) {kind} {outside} of the {accessed} elements it asks for "
                            "outside every tensor it was given, in {where}: `{code}`. In program {program} they are "
                            "{positions} of that access{tensor}. Mask them out: `mask=` with the bounds of that axis"
                            "{other}. The values may be thrown away later, but on a GPU the access itself can stop the "
                            "kernel with an illegal memory access (when the tensor ends at a page boundary)",
                      "zh": "`{kernel}`（由 `{name}` 启动）{kind}了 {outside} 个元素（共访问 {accessed} 个），它们不在传给它的"
                            "任何张量里，位置在{where}：`{code}`。在 program {program} 中，越界的是这次访问的{positions}"
                            "{tensor}。请把它们遮住：用 `mask=` 写出那个轴的边界{other}。这些值之后也许会被丢掉，但在 GPU "
                            "上，这次访问本身就可能让 kernel 因非法内存访问（illegal memory access）而停止（当张量正好在"
                            "一个内存页的边界结束时）"},
    "access_outside_words": {"en": {"load": "reads", "store": "writes", "atomic": "updates atomically",
                                   "other": " (and `other=` for a load)", "into": " (the pointer is into `{tensor}`, "
                                   "of shape {shape})", "every": "every element", "axis": "positions {lo} to {hi} "
                                   "along its axis {axis} (of {n})", "rows": "rows {lo} to {hi} (of {n})",
                                   "columns": "columns {lo} to {hi} (of {n})", "and": " and "},
                            "zh": {"load": "读取", "store": "写入", "atomic": "原子地更新", "other": "（load 还要写 "
                                   "`other=`）", "into": "（指针指向 `{tensor}`，形状 {shape}）", "every": "全部元素",
                                   "axis": "第 {axis} 轴上的位置 {lo} 到 {hi}（共 {n} 个）", "rows": "第 {lo} 到 {hi} 行"
                                   "（共 {n} 行）", "columns": "第 {lo} 到 {hi} 列（共 {n} 列）", "and": "和"}},
    "guard_removed": {"en": "`{name}`: the memory check that runs your kernels was switched off by your code; a "
                            "notebook must not patch Triton's interpreter",
                      "zh": "`{name}`：运行你的 kernel 的内存检查被你的代码关掉了；笔记本不许修改 Triton 的解释器"},
    "store_past_end": {"en": "`{name}` stored past the end of a tensor of shape {shape} that it allocated "
                             "(torch.empty…): a store without a mask, or an offset one row or tile too far",
                       "zh": "`{name}` 写到了它自己分配的形状为 {shape} 的张量（torch.empty…）末尾之外：一次没有掩码的写入，"
                             "或者偏移多了一行或一个分块"},
    "not_launched": {"en": "`{name}` did not launch `{kernel}`: the graded wrapper must run your Triton kernel (it "
                           "launched {launched})",
                     "zh": "`{name}` 没有启动 `{kernel}`：被评分的包装函数必须运行你的 Triton kernel（它启动的是 {launched}）"},
    "no_kernel": {"en": "no kernel", "zh": "没有任何 kernel"},
    "not_yours": {"en": "`{name}` launched a kernel named `{kernel}` that is not the one defined in your notebook: the "
                        "graded kernel must be your own code",
                  "zh": "`{name}` 启动了一个名为 `{kernel}` 的 kernel，但它不是你笔记本里定义的那个：被评分的 kernel 必须是你自己的代码"},
    "forbidden": {"en": "`{name}` called torch `{op}` on tensors of shapes {shapes}: this lesson asks you to compute it "
                        "yourself, so that call costs this check's points",
                  "zh": "`{name}` 对形状为 {shapes} 的张量调用了 torch 的 `{op}`：本课要求你自己计算它，所以这次调用让这个检查不得分"},
    "bad_timing": {"en": "timing `{name}` gave {what}, not a positive number of milliseconds",
                   "zh": "给 `{name}` 计时得到的是 {what}，不是一个正的毫秒数"},
    "bad_compile": {"en": "compiling `{kernel}` gave {what}, not the compiler's report",
                    "zh": "编译 `{kernel}` 得到的是 {what}，不是编译器的报告"},
    "rule_floor": {"en": "{floor:.1g}, about the rounding error of {dtype} here",
                   "zh": "{floor:.1g}，大约是 {dtype} 在这里的舍入误差"},
    "rule_factor": {"en": "{atol:.2g} = {factor:g}× the error PyTorch's own {dtype} computation makes on these inputs "
                          "({own:.2g})",
                    "zh": "{atol:.2g} = PyTorch 自己用 {dtype} 在这些输入上计算的误差（{own:.2g}）的 {factor:g} 倍"},
    "rule_factor_floor": {"en": "{floor:.1g}: {factor:g}× PyTorch's own {dtype} error here ({own:.2g}), but at least "
                                "the rounding floor of {dtype}{tf32}",
                          "zh": "{floor:.1g}：PyTorch 自己的 {dtype} 误差（{own:.2g}）的 {factor:g} 倍，但至少是 {dtype} "
                                "{tf32}的舍入下限"},
    "tf32": {"en": " with TF32 tensor cores", "zh": "（TF32 张量核心）"},
    "not_defined": {"en": "`{name}` is not defined in the notebook (was its cell deleted or renamed?)",
                    "zh": "笔记本里没有定义 `{name}`（它的单元格被删掉或改名了吗？）"},
    "unfinished": {"en": "; unfinished: {todos}", "zh": "；尚未完成：{todos}"},
    "todo_in": {"en": "TODO {numbers} in `{name}`", "zh": "`{name}` 中的 TODO {numbers}"},
    "structure_only": {"en": "structure only: the code was not run", "zh": "只检查了结构：代码没有运行"},
    "load_failed": {"en": "your notebook's code failed to load: {error}", "zh": "你的笔记本代码加载失败：{error}"},
    "repeat_failed": {"en": "failed {failed} of {runs} runs with fresh seeds; the first: ",
                      "zh": "用新随机种子运行 {runs} 次，失败 {failed} 次；第一次失败："},
    "repeat_ok": {"en": "{runs} runs, fresh seeds", "zh": "{runs} 次运行，每次新的随机种子"},
    "seed": {"en": " (seed {seed})", "zh": "（随机种子 {seed}）"},
    "grader_failed": {"en": "the grader itself failed on this check; tell your instructor:\n{trace}",
                      "zh": "评分程序自己在这个检查上出错了；请告诉你的老师：\n{trace}"},
    "needs_gpu": {"en": "a GPU", "zh": " GPU"},
    "needs_interpreter": {"en": "Triton's interpreter or a GPU", "zh": " Triton 解释器或 GPU"},
    "needs_working_interpreter": {"en": "Triton's interpreter, which cannot run on this machine: {why}",
                                  "zh": " Triton 解释器，而这台机器上的解释器不能运行：{why}"},
    "unrunnable_failed": {"en": "not run in {mode} mode (it needs {needs}), and {count} check(s) that did run failed "
                                "({failed}): {rule}",
                          "zh": "在 {mode} 模式下没有运行（它需要{needs}），而且实际运行的检查中有 {count} 个失败了（{failed}）：{rule}"},
    "unrunnable_ok": {"en": "not run in {mode} mode (it needs {needs}); it counts because its code has the right "
                            "structure and every check that did run passed",
                      "zh": "在 {mode} 模式下没有运行（它需要{needs}）；它计分，因为代码结构正确，而且实际运行的检查全部通过"},
    "unrunnable_rule": {"en": "a check that cannot run in this mode counts only when its code has the right structure "
                              "and every check that did run passed",
                        "zh": "在当前模式下无法运行的检查，只有在代码结构正确、并且实际运行的检查全部通过时才计分"},
    "tampering": {"en": "your code uses {what} ({where}: `{code}`){more}. Code that could reach into the grading process "
                        "(the module registry, stack frames, the garbage collector, private torch or Triton internals, "
                        "files and sockets, eval/exec, patched modules) is not allowed in a submission, because the "
                        "grader could no longer trust what it measures; remove it. Attention needs none of it",
                  "zh": "你的代码用到了 {what}（{where}：`{code}`）{more}。提交里不允许出现可能伸进评分进程的代码（模块注册表、"
                        "栈帧、垃圾回收器、torch 或 Triton 的私有内部、文件和套接字、eval/exec、修改模块），因为评分程序将无法再"
                        "信任它测到的东西；请删掉它。注意力计算一样也用不到"},
    "and_more": {"en": " (and {count} more such place{s})", "zh": "（还有 {count} 处）"},
    "not_contained": {"en": "not contained: {why}. While this ran, the submission's code could read every file this "
                            "user can read, the course's answers included",
                      "zh": "没有隔离：{why}。这次运行时，提交的代码可以读取这个用户能读的所有文件，包括课程的答案"},
    "syntax_error": {"en": "the notebook's code has a SyntaxError: {error}", "zh": "笔记本的代码有语法错误：{error}"},
    "not_jit": {"en": "`{name}` must be a Triton kernel (decorated with @triton.jit)",
                "zh": "`{name}` 必须是一个 Triton kernel（用 @triton.jit 装饰）"},
    "never_launches": {"en": "`{name}` never launches `{kernel}` (expected `{kernel}[grid](...)`)",
                       "zh": "`{name}` 从来没有启动 `{kernel}`（应当有 `{kernel}[grid](...)`）"},
    "calls_forbidden": {"en": "`{name}` calls {calls}, which this lesson asks you to write yourself",
                        "zh": "`{name}` 调用了 {calls}，而本课要求你自己实现它"},
    "does_not_use": {"en": "`{name}` does not use {missing}, which this computation needs",
                     "zh": "`{name}` 没有用到 {missing}，而这个计算需要它"},
    "check_failed": {"en": "{check}: 0 of {points} points (the message above says why)",
                     "zh": "{check}：{points} 分中得 0 分（原因见上面的信息）"},
}


def text(key, language="en", **fields):
    """The sentence `key` in `language` (English when the edition has none), filled in with `fields`."""
    texts = MESSAGES[key]
    return texts.get(language or "en", texts["en"]).format(**fields)
