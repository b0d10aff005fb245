"""gpufeed train: a model trained from a packed dataset, with checkpoints, exact resume and DDP.

Modules:
- step.py: TrainStep, the one training step every caller runs, and the tables of precisions and optimizers
- precision.py: the user's precision checked, and what auto picks on this device
- batch_size.py: --batch-size auto, the largest batch that fits, by backing off on out-of-memory
- setup.py: resolving the auto precision and batch size before the run
- config.py: TrainConfig, a frozen dataclass whose unknown keys are an error
- models.py: mlp, cnn, resnet18 and resnet50 (v1.5) in plain torch, built for the data's shape and classes
- inputs.py: the training and validation samples (a packed file or the cached built-in dataset), and the augments
- folder_data.py: a folder given as --data or --val, packed into the cache on first use; the resume check
- loop.py: train(config), the run resolved, the epochs, the evaluation and the result
- evaluate.py: validation accuracy and mean loss over a feed, summed across ranks
- events.py: what a run reports (RunStarted, StepLog, TrainResult) and its one-sentence verdict
- checkpoint.py: checkpoints that survive a kill and load without running pickled code
- outputs.py: the files of --out DIR, config.json, metrics.jsonl, model.safetensors, summary.json
- resume.py: how a run starts in --out DIR: fresh, resumed with its settings checked, replaced, or already complete
- distributed.py: DDP on torchrun's ranks (gpufeed/torchrun.py reads the environment), sums and barriers
- interrupt.py: SIGINT or SIGTERM ends the step, writes a checkpoint and ends the run with `Interrupted`
"""
