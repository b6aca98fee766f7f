/* timed_call.call(f, *args): f(*args) through one named C function, kvc_timed_call, so that
 * callgrind can count the instructions of a benchmark's timed calls alone
 * (--collect-atstart=no --toggle-collect=kvc_timed_call; tests/bench/timed_instructions.py
 * builds and uses it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

__attribute__((noinline, visibility("default"))) PyObject* kvc_timed_call(PyObject* f,
                                                                           PyObject* args) {
  return PyObject_Call(f, args, NULL);
}

static PyObject* call(PyObject* self, PyObject* args) {
  (void)self;
  if (PyTuple_GET_SIZE(args) < 1) {
    PyErr_SetString(PyExc_TypeError, "call(f, *args) needs f");
    return NULL;
  }
  PyObject* rest = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
  if (rest == NULL) return NULL;
  PyObject* out = kvc_timed_call(PyTuple_GET_ITEM(args, 0), rest);
  Py_DECREF(rest);
  return out;
}

static PyMethodDef methods[] = {
    {"call", call, METH_VARARGS, "f(*args), through kvc_timed_call"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "timed_call", NULL, -1, methods};

PyMODINIT_FUNC PyInit_timed_call(void) { return PyModule_Create(&module); }
