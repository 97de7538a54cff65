def too_few(x):
    return x * 2


def too_many(x, scale, bias):
    return x * scale + bias


def no_eps(x, weight):
    return x * weight


def needs_flag(x, *, flag):
    return x if flag else -x


def fits(x, weight, *, eps=1e-5):
    return x * weight + eps


def any_call(*args, **kwargs):
    return args[0]
