r"""The queue: ``python -m gnorm.study queue`` trains the cells that
gnorm's depth studies leave for a GPU or for a CPU in the background,
most wanted first, within a time budget, into the run folders the
studies read. :mod:`~gnorm.study.queue.config` reads ``conf/queue.yaml``
(the priority and each GPU's rates), :mod:`~gnorm.study.queue.plan`
says which cells are pending and in which order,
:mod:`~gnorm.study.queue.run` trains them by a deadline and keeps what a
stopped cell trained, :mod:`~gnorm.study.queue.listing` prints what is
left (``--list``) and :mod:`~gnorm.study.queue.command` is the command.

It sits on :mod:`gnorm.study.runs` and :mod:`gnorm.study.spec`; no
report or verdict imports it.
"""
