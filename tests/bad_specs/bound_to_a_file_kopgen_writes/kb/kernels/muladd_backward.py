def muladd_backward_python(a):
    return a * 3
