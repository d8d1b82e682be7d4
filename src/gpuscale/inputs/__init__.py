"""The data stage: fetch or read CIFAR-10-shaped images and write a prepared dataset."""
