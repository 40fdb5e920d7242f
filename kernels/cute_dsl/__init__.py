"""The built-in suite's CuTe DSL kernels. Each module here imports ``nvidia-cutlass-dsl`` (the
optional extra ``kernelwatch[cute]``), so the suite's specs name their functions
(``CuteKernel("package.module:function")``) and never import these modules themselves."""
