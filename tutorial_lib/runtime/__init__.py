"""Where and how things run: the device, torch's CPU thread count, the cache folder, progress bars,
metrics and checkpoints, and the processes of a run launched on several.

Modules: ``device`` (CUDA / TPU / MPS / CPU in one place), ``cpu_threads`` (the thread count, fixed
per process), ``cache`` (where built models, data, checkpoints and runs are kept), ``progress``
(progress bars for terminals and the built book), ``durable`` (files and folders written whole,
fsynced, and recovered after a crash at any instant), ``tracking`` (metrics to CSV / TensorBoard,
resumable checkpoints), ``distributed`` (several processes under ``accelerate launch``: the
identity in one), ``memory_plan`` (micro-batch, accumulation and checkpointing sized to the model and
the device's free memory). The bottom layer: it imports nothing else of ``tutorial_lib``.
"""
