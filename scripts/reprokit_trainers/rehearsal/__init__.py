"""The CPU rehearsal of a cell at its published size: every step a GPU run takes through the trainer,
on a device of fake tensors that counts the memory it would hold (fakedevice.py). Run by the host
(reprokit/barenode/rehearsal.py) before any GPU time is spent."""
