/* The C that the extension module needs Python.h for: shortcuts to the
 * objects it makes by hand on its hot paths (match()'s ints and lists;
 * the rows it reads are _pyrows.h's).  It is here, not in csrc/, because
 * the core has no Python.h; it is included by _core.pyx alone, after
 * Python.h. */
#ifndef TOPICMATCH_PYOBJECTS_H
#define TOPICMATCH_PYOBJECTS_H

#include <Python.h>
#include <stdint.h>

/* 1 on a free-threaded CPython: another thread may change a list
 * while this one reads it */
#ifdef Py_GIL_DISABLED
#define TM_FREE_THREADED 1
#else
#define TM_FREE_THREADED 0
#endif

#define TM_HIGH_BITS 0x8080808080808080ull    /* each byte's top bit */

/* match()'s ints, kept: a direct-mapped table of the last int made for
 * each of TM_INTS slots (the id's Fibonacci hash picks the slot), so an
 * id that comes back -- a subscriber matched again, the usual case --
 * is one probe and a new reference, where making the int and freeing
 * it with its list cost ~120 instructions (callgrind, match() heavy:
 * 81 ids a call, ~92% of them found: 18,620 -> ~10,810 a call).  Ints
 * are immutable, so a shared one is the same value to every caller.
 * At most TM_INTS ints are held (~200 KiB with the table);
 * release_memory() lets them go.  With the GIL only: on a
 * free-threaded build two matches would race on a slot, so each int
 * is made afresh there.  An int's deallocation runs no Python code,
 * so replacing a slot's int cannot re-enter. */
#define TM_INTS_BITS 12
#define TM_INTS (1u << TM_INTS_BITS)
typedef struct { long long id; PyObject *o; } tm_int_slot;
static tm_int_slot tm_ints[TM_INTS];
static inline PyObject *tm_int(long long id)
{
#ifdef Py_GIL_DISABLED
    return PyLong_FromLongLong(id);
#else
    tm_int_slot *e = &tm_ints[((unsigned long long)id * 0x9E3779B97F4A7C15ull) >> (64 - TM_INTS_BITS)];
    PyObject *o = e->o;
    if (o != NULL && e->id == id) {
        Py_INCREF(o);
        return o;
    }
    PyObject *made = PyLong_FromLongLong(id);
    if (made == NULL)
        return NULL;
    Py_INCREF(made);
    e->id = id;
    e->o = made;
    Py_XDECREF(o);
    return made;
#endif
}
/* A list of n slots for its maker to fill at once, every slot set
 * before anyone else sees it: made as PyList_New(0) (from the free
 * list) with its slots from PyMem_Malloc, not PyList_New(n)'s
 * PyMem_Calloc, whose zeroing is a call to memset (~25 instructions
 * a list of match()'s).  The fields are the default build's list
 * (ob_item, allocated, freed by list_dealloc with PyMem_Free); a
 * free-threaded build allocates a list's slots its own way, and gets
 * PyList_New(n).  NULL with the error set. */
static inline PyObject *tm_list_unset(Py_ssize_t n)
{
#ifdef Py_GIL_DISABLED
    return PyList_New(n);
#else
    if (n == 0)
        return PyList_New(0);
    PyObject **items = (PyObject **)PyMem_Malloc((size_t)n * sizeof(PyObject *));
    if (items == NULL)
        return PyErr_NoMemory();
    PyObject *l = PyList_New(0);
    if (l == NULL) {
        PyMem_Free(items);
        return NULL;
    }
    ((PyListObject *)l)->ob_item = items;
    ((PyListObject *)l)->allocated = n;
    Py_SET_SIZE(l, n);
    return l;
#endif
}
/* Drop every kept int (release_memory). */
static void tm_ints_clear(void)
{
    for (unsigned i = 0; i < TM_INTS; i++)
        Py_CLEAR(tm_ints[i].o);
}

#endif
