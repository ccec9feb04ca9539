"""The model zoo: real library models (transformers, torchvision, timm) in tiny random configs.

``vision.import_torchvision()`` makes torchvision (and timm) importable on CPU machines whose
torchvision wheel is a CUDA build; ``models`` builds the zoo's cases.
"""
