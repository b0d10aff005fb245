"""The training framework a script uses (plain PyTorch, the Hugging Face Trainer, Lightning, accelerate), where and
with what settings its training loader is set up, and the fixes in that framework's words. Below observe/ and
findings/: the hooks record with setup.py, the Observation carries its Setup, the finding modules word their fixes
with words.py. Nothing here loads torch at import.

- setup.py: Setup, LoaderOrigin, LoaderKnobs; Constructions (every DataLoader built, recorded where it was made)
  and setup_of, the Setup of a run
- words.py: the fixes in the framework's words (TrainingArguments, train_dataloader(), accelerate), the --try paths
"""
