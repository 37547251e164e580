// The extension module visdet_ops._C. It carries no Python functions: loading
// it runs the TORCH_LIBRARY registrations of every op. A bare PyInit__C keeps
// the module inside the limited API (one abi3 wheel for every CPython >= 3.10).
#include <Python.h>

extern "C" {
PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT,
      "_C",  // name
      "visdet_ops compiled ops; use them through visdet_ops or torch.ops.visdet_ops",
      -1,    // size
      nullptr,
  };
  return PyModule_Create(&module_def);
}
}
