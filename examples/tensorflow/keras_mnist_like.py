"""A small Keras network trained on several ranks with chorus.keras, on generated 28x28
images of 10 classes (MNIST-like, nothing to download).

    chorus-run -n 2 python examples/tensorflow/keras_mnist_like.py

Each rank trains on its own shard of the data; hvd.DistributedOptimizer averages the
gradients over the ranks before every step, so every rank holds the same model. Rank 0
prints the loss and accuracy of every epoch, averaged over the ranks.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quiet TensorFlow's start-up messages

import keras  # noqa: E402
import numpy as np  # noqa: E402

import chorus.keras as hvd  # noqa: E402


def make_images(count, seed, prototypes):
    """count noisy copies of the 10 class prototypes: a task the network can learn."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, count)
    x = prototypes[labels] + 3.0 * rng.standard_normal((count, 28, 28, 1))
    return x.astype(np.float32), labels


def make_model():
    return keras.Sequential([
        keras.Input((28, 28, 1)),               # an input shape: the weights exist at once
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def print_epoch(epoch, logs):
    print("epoch %d  loss %.4f  accuracy %.3f  val_loss %.4f  val_accuracy %.3f"
          % (epoch, logs["loss"], logs["accuracy"], logs["val_loss"], logs["val_accuracy"]),
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=512, help="samples per rank and epoch")
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate of one rank")
    args = parser.parse_args()

    # One communicator over the job that chorus-run (or torchrun, or mpirun) started.
    hvd.init()

    # Every rank makes the same prototypes, and its own images from them: the shards of
    # the data differ by rank.
    prototypes = np.random.default_rng(1).standard_normal((10, 28, 28, 1))
    x, y = make_images(args.samples, seed=1000 + hvd.rank(), prototypes=prototypes)
    x_val, y_val = make_images(256, seed=2000 + hvd.rank(), prototypes=prototypes)

    model = make_model()
    # The gradients of a step are averaged over size() ranks, that is over a batch
    # size() times larger: the learning rate is scaled alike, and warmed up to below.
    scaled_lr = args.lr * hvd.size()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr, momentum=0.9))
    # jit_compile=False: chorus's ops run outside XLA (Keras would turn XLA on by itself
    # on a machine with a GPU).
    model.compile(optimizer=optimizer, jit_compile=False, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    callbacks = [
        # Start every rank from rank 0's initial weights (each rank drew its own).
        hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=0),
        # Replace each epoch's metrics by their average over the ranks, so that every
        # rank reports (and acts on) the same numbers.
        hvd.callbacks.MetricAverageCallback(),
        # Go from the rate of one rank to the scaled rate over the first epoch.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=1),
    ]
    if hvd.rank() == 0:
        # After MetricAverageCallback: rank 0 prints the averages as each epoch ends. (The
        # progress bar is off, verbose=0, so that the ranks do not print over each other.)
        callbacks.append(keras.callbacks.LambdaCallback(on_epoch_end=print_epoch))
        print("%d ranks, %d samples per rank and epoch, batches of %d per rank"
              % (hvd.size(), args.samples, args.batch), flush=True)
    start = time.time()
    model.fit(x, y, batch_size=args.batch, epochs=args.epochs, validation_data=(x_val, y_val),
              callbacks=callbacks, verbose=0)
    if hvd.rank() == 0:
        print("trained in %.1fs" % (time.time() - start), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
