"""Layer tables of ResNet-50, VGG-16 and Inception v3 as torchvision builds them, and their costs.

Written out so the catalog of known models (workloads.known) can derive parameters, FLOPs
and activation memory from the architecture rather than copy them: the parameter counts
must equal torchvision's published `num_params` and the multiply-accumulates its `_ops`
(GMACs, which torchvision labels GFLOPS), and tests check both. Pure Python, no framework.

Activation memory follows the rule of `workloads.costs.activation_elements`: a tensor is
kept when some backward reads it (each conv's and dense layer's input, each BatchNorm's
input, each ReLU's output, each pooling window's input, the softmax), counted once however
many layers read it. In these three networks a pool's input is always kept anyway (a ReLU
output, a concatenation, or VGG's pool5 output, which its 7x7 pool reads). Dropout (VGG's
and Inception's classifiers) is left out; so are BatchNorm's per-channel statistics and
torch's int64 max-pool indices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workloads.operators import Op, conv, cross_entropy, elementwise, gemm, norm


@dataclass(frozen=True)
class Shape:
    """One sample's feature map: height, width, channels."""

    h: int
    w: int
    c: int

    @property
    def size(self) -> int:
        return self.h * self.w * self.c


@dataclass(frozen=True)
class ConvNet:
    """What a network costs per sample, from its layer table."""

    name: str
    params: int
    macs: int  # forward multiply-accumulates (convs and dense layers only)
    kept: int  # values kept for backward (the activation rule above)
    ops: tuple[Op, ...] = ()  # the forward operators of one sample (workloads.operators)


@dataclass
class _Builder:
    """Walks an architecture, adding up weights, MACs and kept values as layers are added.

    A layer's input is always a tensor an earlier call counted already (the image, a ReLU's
    output, a pool's read output or a concatenation), so each call counts only what it adds.
    """

    params: int = 0
    macs: int = 0
    kept: int = 0
    ops: list[Op] = field(default_factory=list)

    def keep(self, x: Shape) -> None:
        self.kept += x.size

    def conv(self, x: Shape, c_out: int, k: int | tuple[int, int], stride: int = 1,
             pad: int | tuple[int, int] = 0, *, bn: bool = True, relu: bool = True) -> Shape:
        """A conv (+ BatchNorm, no bias; else with bias) (+ ReLU)."""
        kh, kw = (k, k) if isinstance(k, int) else k
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        out = Shape((x.h + 2 * ph - kh) // stride + 1, (x.w + 2 * pw - kw) // stride + 1, c_out)
        self.params += kh * kw * x.c * c_out + (2 * c_out if bn else c_out)
        self.macs += kh * kw * x.c * c_out * out.h * out.w
        self.kept += out.size * (int(bn) + int(relu))  # BatchNorm's input, ReLU's output
        self.ops.append(conv("conv", out.h * out.w, c_out, kh * kw * x.c, x.size,
                             bias=not bn))
        if bn:
            self.ops.append(norm("batchnorm", out.size))
        if relu:
            self.ops.append(elementwise("relu", 2 * out.size))
        return out

    def residual(self, x: Shape) -> None:
        """The residual add (read two, write one) and the ReLU after it."""
        self.ops += [elementwise("add", 3 * x.size, 2 * x.size),
                     elementwise("relu", 2 * x.size)]

    def pool(self, x: Shape, k: int, stride: int, pad: int = 0, *, read: bool = True) -> Shape:
        """A max or average pool; its output is kept when a later layer reads it."""
        out = Shape((x.h + 2 * pad - k) // stride + 1, (x.w + 2 * pad - k) // stride + 1, x.c)
        self.ops.append(elementwise("pool", x.size + out.size, 2 * x.size + out.size))
        if read:
            self.keep(out)
        return out

    def dense(self, n_in: int, n_out: int, relu: bool = False) -> None:
        """A dense layer; keeps its output: a ReLU's (hidden layers) or the softmax's (last)."""
        self.params += n_in * n_out + n_out
        self.macs += n_in * n_out
        self.kept += n_out
        self.ops.append(gemm("dense", 1, n_out, n_in, bias=True))
        if relu:
            self.ops.append(elementwise("relu", 2 * n_out))

    def concat(self, parts: list[Shape]) -> Shape:
        """Channel concatenation: a copy the next layers read."""
        out = Shape(parts[0].h, parts[0].w, sum(p.c for p in parts))
        self.keep(out)
        self.ops.append(elementwise("concat", 2 * out.size, 2 * out.size))
        return out

    def done(self, name: str, classes: int) -> ConvNet:
        """The network, its loss (softmax cross-entropy over ``classes``) last."""
        return ConvNet(name, self.params, self.macs, self.kept,
                       (*self.ops, cross_entropy("loss", 1, classes)))


def resnet50(classes: int = 1000, image: int = 224) -> ConvNet:
    """ResNet-50 v1.5 (torchvision `resnet50`): stride 2 in the bottleneck's 3x3 conv."""
    b = _Builder()
    x = Shape(image, image, 3)
    b.keep(x)
    x = b.conv(x, 64, 7, 2, 3)
    x = b.pool(x, 3, 2, 1)
    for mid, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(n):
            s = stride if i == 0 else 1
            h = b.conv(x, mid, 1)
            h = b.conv(h, mid, 3, s, 1)
            h = b.conv(h, 4 * mid, 1, relu=False)
            if i == 0:
                b.conv(x, 4 * mid, 1, s, relu=False)  # downsample projection
            x = h
            b.keep(x)  # the ReLU after the residual add
            b.residual(x)
    x = b.pool(x, x.h, 1)  # adaptive average pool to 1x1
    b.dense(x.c, classes)
    return b.done("resnet50", classes)


def vgg16(classes: int = 1000, image: int = 224) -> ConvNet:
    """VGG-16, configuration D of Simonyan & Zisserman (torchvision `vgg16`, no BatchNorm)."""
    b = _Builder()
    x = Shape(image, image, 3)
    b.keep(x)
    for width, n in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(n):
            x = b.conv(x, width, 3, 1, 1, bn=False)
        x = b.pool(x, 2, 2)  # pool5's output is read by the 7x7 pool below
    x = b.pool(x, 1, 1)  # torchvision's adaptive average pool to 7x7 (a copy at 224x224)
    b.dense(x.size, 4096, relu=True)
    b.dense(4096, 4096, relu=True)
    b.dense(4096, classes)
    return b.done("vgg16", classes)


def _inception_a(b: _Builder, x: Shape, pool_features: int) -> Shape:
    b1 = b.conv(x, 64, 1)
    b5 = b.conv(b.conv(x, 48, 1), 64, 5, 1, 2)
    b3 = b.conv(b.conv(b.conv(x, 64, 1), 96, 3, 1, 1), 96, 3, 1, 1)
    bp = b.conv(b.pool(x, 3, 1, 1), pool_features, 1)
    return b.concat([b1, b5, b3, bp])


def _inception_b(b: _Builder, x: Shape) -> Shape:
    b3 = b.conv(x, 384, 3, 2)
    bd = b.conv(b.conv(b.conv(x, 64, 1), 96, 3, 1, 1), 96, 3, 2)
    bp = b.pool(x, 3, 2, read=False)  # only copied into the concatenation
    return b.concat([b3, bd, bp])


def _inception_c(b: _Builder, x: Shape, c7: int) -> Shape:
    b1 = b.conv(x, 192, 1)
    b7 = b.conv(b.conv(b.conv(x, c7, 1), c7, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0))
    bd = b.conv(x, c7, 1)
    for c_out, k, pad in ((c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)),
                          (192, (1, 7), (0, 3))):
        bd = b.conv(bd, c_out, k, 1, pad)
    bp = b.conv(b.pool(x, 3, 1, 1), 192, 1)
    return b.concat([b1, b7, bd, bp])


def _inception_d(b: _Builder, x: Shape) -> Shape:
    b3 = b.conv(b.conv(x, 192, 1), 320, 3, 2)
    b7 = b.conv(b.conv(x, 192, 1), 192, (1, 7), 1, (0, 3))
    b7 = b.conv(b.conv(b7, 192, (7, 1), 1, (3, 0)), 192, 3, 2)
    bp = b.pool(x, 3, 2, read=False)
    return b.concat([b3, b7, bp])


def _inception_e(b: _Builder, x: Shape) -> Shape:
    b1 = b.conv(x, 320, 1)
    b3 = b.conv(x, 384, 1)  # read by both the 1x3 and the 3x1 conv, kept once
    b3_pair = [b.conv(b3, 384, (1, 3), 1, (0, 1)), b.conv(b3, 384, (3, 1), 1, (1, 0))]
    bd = b.conv(b.conv(x, 448, 1), 384, 3, 1, 1)
    bd_pair = [b.conv(bd, 384, (1, 3), 1, (0, 1)), b.conv(bd, 384, (3, 1), 1, (1, 0))]
    bp = b.conv(b.pool(x, 3, 1, 1), 192, 1)
    return b.concat([b1, *b3_pair, *bd_pair, bp])  # the inner concatenations are not read


def inception_v3(classes: int = 1000, image: int = 299, aux: bool = True) -> ConvNet:
    """Inception v3 (torchvision `inception_v3`), with the auxiliary classifier training uses."""
    b = _Builder()
    x = Shape(image, image, 3)
    b.keep(x)
    x = b.conv(x, 32, 3, 2)
    x = b.conv(x, 32, 3)
    x = b.conv(x, 64, 3, 1, 1)
    x = b.pool(x, 3, 2)
    x = b.conv(x, 80, 1)
    x = b.conv(x, 192, 3)
    x = b.pool(x, 3, 2)
    for pool_features in (32, 64, 64):
        x = _inception_a(b, x, pool_features)
    x = _inception_b(b, x)
    for c7 in (128, 160, 160, 192):
        x = _inception_c(b, x, c7)
    if aux:  # InceptionAux on Mixed_6e: 5x5/3 average pool, 1x1 conv, 5x5 conv, dense
        a = b.conv(b.pool(x, 5, 3), 128, 1)
        a = b.conv(a, 768, 5)
        a = b.pool(a, a.h, 1)
        b.dense(a.c, classes)
    x = _inception_d(b, x)
    for _ in range(2):
        x = _inception_e(b, x)
    x = b.pool(x, x.h, 1)
    b.dense(x.c, classes)
    return b.done("inception_v3", classes)


def forward_flops(net: ConvNet) -> int:
    """2 FLOPs per multiply-accumulate, the convention of workloads.costs."""
    return 2 * net.macs

