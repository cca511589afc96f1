// jsdom lacks DragEvent, which @lumino/dragdrop (pulled in by @lumino/widgets) subclasses at import.
if (typeof MouseEvent !== 'undefined' && typeof (globalThis as any).DragEvent === 'undefined') {
  (globalThis as any).DragEvent = class DragEvent extends MouseEvent {};
}
